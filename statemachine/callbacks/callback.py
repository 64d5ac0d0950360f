"""`lightning.pytorch.callbacks.callback`."""

from stages.callbacks.callback import Callback

__all__ = ["Callback"]
