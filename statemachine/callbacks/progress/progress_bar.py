"""`lightning.pytorch.callbacks.progress.progress_bar`."""

from stages.callbacks.progress import ProgressBar, get_standard_metrics

__all__ = ["ProgressBar", "get_standard_metrics"]
