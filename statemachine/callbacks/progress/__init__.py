"""`lightning.pytorch.callbacks.progress`: the progress bar callbacks."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "ProgressBar": "stages.callbacks.progress",
    "TQDMProgressBar": "stages.callbacks.progress",
}
_NOT_SUPPORTED = {"RichProgressBar": "this callback is not built yet"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
