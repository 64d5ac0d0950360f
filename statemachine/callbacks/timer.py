"""`lightning.pytorch.callbacks.timer`."""

from stages.callbacks.timer import Timer

__all__ = ["Timer"]
