"""`lightning.pytorch.callbacks.early_stopping`."""

from stages.callbacks.early_stopping import EarlyStopping

__all__ = ["EarlyStopping"]
