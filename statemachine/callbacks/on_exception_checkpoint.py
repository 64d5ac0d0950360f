"""`lightning.pytorch.callbacks.on_exception_checkpoint`."""

from stages.callbacks.on_exception_checkpoint import OnExceptionCheckpoint

__all__ = ["OnExceptionCheckpoint"]
