"""`lightning.pytorch.callbacks.progress.rich_progress`."""

from stages.callbacks.rich_progress import RichProgressBar, RichProgressBarTheme

__all__ = ["RichProgressBar", "RichProgressBarTheme"]
