"""`lightning.pytorch.utilities.parsing`."""

from stages.hparams import AttributeDict

__all__ = ["AttributeDict"]
