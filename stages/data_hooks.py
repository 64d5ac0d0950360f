"""The data hooks a LightningModule and a LightningDataModule share: preparing data, the loaders, and a batch's
way onto the device."""

from __future__ import annotations

from typing import Any

from stages.exceptions import MisconfigurationException


class DataHooks:
    """Data preparation, the four loaders and the batch transfer hooks, with Lightning's defaults. A DataModule's
    hooks take the place of the module's when the Trainer is given one."""

    trainer: Any  # both owners of these hooks are attached to a Trainer

    def _init_data_hooks(self) -> None:
        # `prepare_data` runs on each node's local rank 0 (False: on the global rank 0 only). An empty loader on some
        # ranks while others have batches is refused, unless this is set: then the user keeps the ranks in step.
        self.prepare_data_per_node = True
        self.allow_zero_length_dataloader_with_multiple_devices = False

    def _not_implemented(self, hook: str) -> MisconfigurationException:
        return MisconfigurationException(
            f"`{hook}` must be implemented to be used with the Lightning Trainer "
            f"({type(self).__name__} does not implement it)"
        )

    def prepare_data(self) -> None:
        """Download or write data once per node, before `setup` (override it)."""

    def setup(self, stage: str) -> None:
        """Build what `stage` ("fit", "validate", "test" or "predict") needs, on every process (override it)."""

    def teardown(self, stage: str) -> None:
        """Release what setup built (override it)."""

    def train_dataloader(self) -> Any:
        raise self._not_implemented("train_dataloader")

    def val_dataloader(self) -> Any:
        raise self._not_implemented("val_dataloader")

    def test_dataloader(self) -> Any:
        raise self._not_implemented("test_dataloader")

    def predict_dataloader(self) -> Any:
        raise self._not_implemented("predict_dataloader")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it moves to the device (override it; the default returns it as it is)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Move a batch to `device`: by default every tensor in it, through the strategy."""
        return self.trainer.strategy.batch_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch once it is on the device (override it; the default returns it as it is)."""
        return batch
