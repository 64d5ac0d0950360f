"""`lightning.pytorch.callbacks.progress.progress_bar`."""

from stages.callbacks.progress import ProgressBar

__all__ = ["ProgressBar"]
