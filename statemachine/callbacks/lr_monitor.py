"""`lightning.pytorch.callbacks.lr_monitor`."""

from stages.callbacks.lr_monitor import LearningRateMonitor

__all__ = ["LearningRateMonitor"]
