"""`lightning.pytorch.callbacks.checkpoint`."""

from stages.callbacks.callback import Checkpoint

__all__ = ["Checkpoint"]
