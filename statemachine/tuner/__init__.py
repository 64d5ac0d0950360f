"""`lightning.pytorch.tuner`: the batch-size and learning-rate finders are not built yet."""

from statemachine._exports import lazy_exports

__all__: list[str] = []
__getattr__, __dir__ = lazy_exports(__name__, {}, {"Tuner": "the batch size and learning rate finders are not built"})
