"""`lightning.pytorch.core.module`."""

from stages.module import LightningModule

__all__ = ["LightningModule"]
