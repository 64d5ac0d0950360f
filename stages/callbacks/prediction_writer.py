"""BasePredictionWriter: subclass it to write predictions to disk as they are made or once per predict run."""

from __future__ import annotations

from enum import Enum
from typing import Any

from stages.callbacks.callback import Callback
from stages.dataloader_iter import takes_dataloader_iter
from stages.exceptions import MisconfigurationException


class WriteInterval(Enum):
    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Calls `write_on_batch_end` after each predict batch and/or `write_on_epoch_end` once all predict loaders
    ran, as `write_interval` says. `batch_indices` are the dataset indices of each batch's samples (from the
    loader's batch sampler; None when the loader has none). Predictions reach `write_on_epoch_end` even with
    `return_predictions=False`."""

    def __init__(self, write_interval: str = "batch") -> None:
        allowed = [interval.value for interval in WriteInterval]
        if write_interval not in allowed:
            raise MisconfigurationException(f"write_interval={write_interval!r} should be one of {allowed}")
        self.interval = WriteInterval(write_interval)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if takes_dataloader_iter(pl_module.predict_step):
            raise NotImplementedError("a prediction writer does not support predict_step(dataloader_iter)")

    def write_on_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        prediction: Any,
        batch_indices: list[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__} writes on batch end but does not define write_on_batch_end")

    def write_on_epoch_end(
        self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: list[list[Any]]
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__} writes on epoch end but does not define write_on_epoch_end")

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.interval.on_batch:
            indices = trainer.run.prediction_record.current_batch_indices
            self.write_on_batch_end(trainer, pl_module, outputs, indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.interval.on_epoch:
            record = trainer.run.prediction_record
            self.write_on_epoch_end(trainer, pl_module, record.predictions, record.epoch_batch_indices)
