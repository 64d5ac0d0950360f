"""`lightning.pytorch.utilities.parsing`."""

from stages.hparams import AttributeDict, get_init_args, is_picklable
from statemachine.tuner.attributes import lightning_getattr, lightning_hasattr, lightning_setattr

__all__ = [
    "AttributeDict",
    "get_init_args",
    "is_picklable",
    "lightning_getattr",
    "lightning_hasattr",
    "lightning_setattr",
]
