"""`lightning.pytorch.callbacks.progress.tqdm_progress`."""

from stages.callbacks.progress import Tqdm, TQDMProgressBar, convert_inf

__all__ = ["TQDMProgressBar", "Tqdm", "convert_inf"]
