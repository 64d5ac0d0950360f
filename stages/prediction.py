"""The `predicting` handler: `predict_step` over every predict loader, with Lightning's hook order."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from stages import data
from stages.batch_indices import RecordingBatchSampler, recording
from stages.callbacks.prediction_writer import BasePredictionWriter
from stages.contract import module_of, run_of
from stages.dataloader_iter import takes_dataloader_iter
from stages.eval_batches import calls, run_batches
from stages.exceptions import TrainerWarning
from stages.hooks import check_takes_dataloader_idx

if TYPE_CHECKING:
    from stages.contract import RunView, TrainerView


_HOOKS = ("on_predict_batch_start", "predict_step", "on_predict_batch_end")


@dataclass
class PredictionRecord:
    """What prediction writers read: the running batch's dataset indices, and per loader every batch's indices
    and predictions (kept when a writer writes once per run)."""

    current_batch_indices: list[Any] | None = None
    epoch_batch_indices: list[list[Any]] = field(default_factory=list)
    outputs: list[list[Any]] = field(default_factory=list)

    @property
    def predictions(self) -> Any:
        return self.outputs[0] if len(self.outputs) == 1 else self.outputs


def run_predict(run: RunView) -> str:
    trainer = run.trainer
    limit = trainer.limit_predict_batches
    trainer.predict_dataloaders = None if limit == 0 else data.request(trainer, "predict")
    loaders = data.as_list(trainer.predict_dataloaders)
    writers = [callback for callback in trainer.callbacks if isinstance(callback, BasePredictionWriter)]
    recorders: list[RecordingBatchSampler | None] = [None] * len(loaders)
    if writers:
        wrapped = [recording(loader) for loader in loaders]
        loaders = [loader for loader, _ in wrapped]
        recorders = [recorder for _, recorder in wrapped]
    run.prediction_record = PredictionRecord()
    counts = [data.limited_batches(loader, limit, "limit_predict_batches") for loader in loaders]
    trainer.num_predict_batches = counts
    keep_for_writers = any(writer.interval.on_epoch for writer in writers)
    predictions = _predict(trainer, loaders, counts, recorders, keep_for_writers) if sum(counts) else []
    if run.return_predictions:
        run.predictions = predictions[0] if len(predictions) == 1 else predictions
    return "finish"


def _predict(
    trainer: TrainerView,
    loaders: list[Any],
    counts: list[int | float],
    recorders: list[RecordingBatchSampler | None],
    keep_for_writers: bool,
) -> list[list[Any]]:
    hooks = run_of(trainer).hooks
    progress = trainer.predict_progress
    keep = run_of(trainer).return_predictions or keep_for_writers
    record = run_of(trainer).prediction_record
    # The whole loop, its start and end hooks included, runs without autograd.
    grad_mode = torch.inference_mode() if trainer.inference_mode else torch.no_grad()
    for loader in loaders:
        data.set_sampler_epoch(loader, trainer.current_epoch)
    with grad_mode:
        progress.reset_current()  # before the start hooks, which read this run's counters
        module_of(trainer)._record_modes()
        hooks.module("on_predict_model_eval")
        hooks.callbacks("on_predict_start")
        hooks.module("on_predict_start")
        hooks.callbacks("on_predict_epoch_start")
        hooks.module("on_predict_epoch_start")
        outputs: list[list[Any]] = [[] for _ in loaders]
        record.outputs = outputs
        record.epoch_batch_indices = [[] for _ in loaders]
        fetching = takes_dataloader_iter(module_of(trainer).predict_step)

        def before(batch: Any, batch_idx: int, dataloader_idx: int) -> None:
            # A step that fetches its own batches gets no batch indices: which batches a call drew is its own.
            recorder = None if fetching else recorders[dataloader_idx]
            if recorder is not None:
                record.current_batch_indices = recorder.seen[batch_idx]
                if keep_for_writers:
                    record.epoch_batch_indices[dataloader_idx].append(record.current_batch_indices)

        warned = False

        def after(prediction: Any, dataloader_idx: int, is_last: bool) -> None:
            nonlocal warned
            if prediction is None and not warned:
                warned = True  # once per run, as Lightning does
                warnings.warn(
                    "predict returned None if it was on purpose, ignore this warning... (`predict_step` returned "
                    "None for a batch)",
                    TrainerWarning,
                    stacklevel=2,
                )
            if keep:
                outputs[dataloader_idx].append(prediction)

        if not fetching:
            check_takes_dataloader_idx(module_of(trainer), "predict_step", "predict_dataloader", len(loaders))
        batch_calls = calls(trainer, loaders, counts, "predict", fetching)
        run_batches(trainer, _HOOKS, batch_calls, fetching, len(loaders), progress, before, after)
        hooks.callbacks("on_predict_epoch_end")
        hooks.module("on_predict_epoch_end")
        hooks.callbacks("on_predict_end")
        hooks.module("on_predict_end")
        hooks.module("on_predict_model_train")
    return outputs
