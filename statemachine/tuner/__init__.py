"""`lightning.pytorch.tuner`: `Tuner` (learning-rate and batch-size searches), and `TUNER_TABLE`, the built-in
table with the tuning states (`python -m statemachine.engine.diagram --table statemachine.tuner:TUNER_TABLE`)."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "Tuner": "statemachine.tuner.tuning",
    "TUNER_TABLE": "statemachine.tuner.table",
    "LRFinder": "statemachine.tuner.lr_finder",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
