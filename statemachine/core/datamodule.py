"""`lightning.pytorch.core.datamodule`."""

from stages.datamodule import LightningDataModule

__all__ = ["LightningDataModule"]
