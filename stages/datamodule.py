"""LightningDataModule: data preparation, splits and loaders in one reusable object."""

from __future__ import annotations

from typing import Any

from stages.exceptions import MisconfigurationException
from stages.hparams import HyperparametersMixin


class LightningDataModule(HyperparametersMixin):
    def __init__(self) -> None:
        self.trainer: Any = None
        self.prepare_data_per_node = True
        self._init_hparams()

    def prepare_data(self) -> None:
        """Download or write data once per node (override it)."""

    def setup(self, stage: str) -> None:
        """Build the splits for `stage` (override it)."""

    def teardown(self, stage: str) -> None:
        """Release what setup built (override it)."""

    def train_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.train_dataloader() is not implemented")

    def val_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.val_dataloader() is not implemented")

    def test_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.test_dataloader() is not implemented")

    def predict_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.predict_dataloader() is not implemented")

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        return self.trainer.strategy.batch_to_device(batch, device)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (override both)."""

    def on_exception(self, exception: BaseException) -> None:
        """Called when a run fails (override it)."""
