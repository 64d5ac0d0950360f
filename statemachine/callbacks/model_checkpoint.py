"""`lightning.pytorch.callbacks.model_checkpoint`."""

from stages.callbacks.model_checkpoint import ModelCheckpoint

__all__ = ["ModelCheckpoint"]
