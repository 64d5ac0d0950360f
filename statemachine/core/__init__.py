"""`lightning.pytorch.core`: LightningModule and LightningDataModule."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "LightningDataModule": "stages.datamodule",
    "LightningModule": "stages.module",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
