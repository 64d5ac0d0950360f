"""`lightning.pytorch.callbacks.progress`: the progress bar callbacks."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "ProgressBar": "stages.callbacks.progress",
    "TQDMProgressBar": "stages.callbacks.progress",
    "RichProgressBar": "stages.callbacks.rich_progress",
    "RichProgressBarTheme": "stages.callbacks.rich_progress",
}
_NOT_SUPPORTED: dict[str, str] = {}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
