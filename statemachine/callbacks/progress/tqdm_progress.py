"""`lightning.pytorch.callbacks.progress.tqdm_progress`."""

from stages.callbacks.progress import TQDMProgressBar

__all__ = ["TQDMProgressBar"]
