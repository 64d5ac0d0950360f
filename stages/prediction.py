"""The `predicting` handler: `predict_step` over every predict loader (reference 5.7)."""

from __future__ import annotations

from typing import Any

import torch

from stages import data


def run_predict(trainer: Any) -> str:
    limit = trainer.limit_predict_batches
    trainer.predict_dataloaders = None if limit == 0 else data.request(trainer, "predict")
    loaders = data.as_list(trainer.predict_dataloaders)
    counts = [data.limited_batches(loader, limit, "limit_predict_batches") for loader in loaders]
    trainer.num_predict_batches = counts
    predictions = _predict(trainer, loaders, counts) if sum(counts) else []
    if trainer._run.return_predictions:
        trainer._run.predictions = predictions[0] if len(predictions) == 1 else predictions
    return "finish"


def _predict(trainer: Any, loaders: list[Any], counts: list[int | float]) -> list[list[Any]]:
    hooks = trainer._hooks
    progress = trainer.predict_progress
    keep = trainer._run.return_predictions
    # The whole loop, its start and end hooks included, runs without autograd.
    grad_mode = torch.inference_mode() if trainer.inference_mode else torch.no_grad()
    with grad_mode:
        trainer.lightning_module._record_modes()
        hooks.module("on_predict_model_eval")
        hooks.callbacks("on_predict_start")
        hooks.module("on_predict_start")
        hooks.callbacks("on_predict_epoch_start")
        hooks.module("on_predict_epoch_start")
        progress.reset_current()
        outputs: list[list[Any]] = [[] for _ in loaders]
        for dataloader_idx, (loader, count) in enumerate(zip(loaders, counts)):
            for batch_idx, batch, _ in data.fetch(loader, count):
                progress.increment_ready()
                batch = data.transfer(trainer, batch, dataloader_idx)
                args = (batch, batch_idx, dataloader_idx) if len(loaders) > 1 else (batch, batch_idx)
                hooks.callbacks("on_predict_batch_start", *args)
                hooks.module("on_predict_batch_start", *args)
                progress.increment_started()
                with trainer.strategy.precision.forward_context():
                    prediction = hooks.module("predict_step", *args)
                progress.increment_processed()
                hooks.callbacks("on_predict_batch_end", prediction, *args)
                hooks.module("on_predict_batch_end", prediction, *args)
                progress.increment_completed()
                if keep:
                    outputs[dataloader_idx].append(prediction)
        hooks.callbacks("on_predict_epoch_end")
        hooks.module("on_predict_epoch_end")
        hooks.callbacks("on_predict_end")
        hooks.module("on_predict_end")
        hooks.module("on_predict_model_train")
    return outputs
