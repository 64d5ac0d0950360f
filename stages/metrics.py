"""`self.log`: per-hook defaults, step values, epoch reductions, and where each value goes (reference 6)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from stages.exceptions import MisconfigurationException

_STEP_HOOKS = frozenset(
    {
        "training_step",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_before_backward",
        "backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_before_zero_grad",
        "optimizer_step",
        "optimizer_zero_grad",
        "configure_gradient_clipping",
        "clip_gradients",
        "lr_scheduler_step",
    }
)
_EVAL_BATCH_HOOKS = frozenset(
    {
        "validation_step",
        "test_step",
        "on_validation_batch_start",
        "on_validation_batch_end",
        "on_test_batch_start",
        "on_test_batch_end",
    }
)
_EPOCH_ONLY_HOOKS = frozenset(
    {
        "on_train_start",
        "on_train_epoch_start",
        "on_train_epoch_end",
        "on_validation_start",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_test_start",
        "on_test_epoch_start",
        "on_test_epoch_end",
    }
)


class LogValueError(MisconfigurationException, ValueError):
    """A value `self.log` cannot take. Lightning raises `ValueError` here; both types catch it."""


_REDUCTIONS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}
_TORCH_REDUCTIONS = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min"}


def _flags(fx: str, on_step: bool | None, on_epoch: bool | None) -> tuple[bool, bool]:
    if fx in _STEP_HOOKS:
        defaults = (True, False)
    elif fx in _EVAL_BATCH_HOOKS:
        defaults = (False, True)
    elif fx in _EPOCH_ONLY_HOOKS:
        if on_step or on_epoch is False:
            raise MisconfigurationException(
                f"self.log in {fx} allows only on_step=False, on_epoch=True "
                f"(got on_step={on_step}, on_epoch={on_epoch})"
            )
        defaults = (False, True)
    else:
        raise MisconfigurationException(f"self.log is not allowed in {fx}; log from a step or epoch hook")
    step = defaults[0] if on_step is None else on_step
    epoch = defaults[1] if on_epoch is None else on_epoch
    return step, epoch


def _reduction(reduce_fx: Any) -> str:
    if isinstance(reduce_fx, str) and reduce_fx.lower() in _REDUCTIONS:
        return _REDUCTIONS[reduce_fx.lower()]
    if reduce_fx in _TORCH_REDUCTIONS:
        return _TORCH_REDUCTIONS[reduce_fx]
    raise MisconfigurationException(
        f"reduce_fx={reduce_fx!r} must be 'mean', 'sum', 'max', 'min' or the torch function"
    )


def _as_tensor(name: str, value: Any, keep_graph: bool) -> Tensor:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise LogValueError(f"self.log({name!r}) needs a scalar; got a tensor of shape {tuple(value.shape)}")
        value = value if keep_graph else value.detach()
        return value.reshape(()).float() if not value.is_floating_point() else value.reshape(())
    if isinstance(value, numbers.Number) and not isinstance(value, bool | complex):
        return torch.tensor(float(value))
    raise LogValueError(f"self.log({name!r}) got {type(value).__name__}; log a number or a scalar tensor")


def _is_torchmetric(value: Any) -> bool:
    """A torchmetrics `Metric` (checked without importing torchmetrics, which is optional)."""
    return any(cls.__module__.startswith("torchmetrics") and cls.__name__ == "Metric" for cls in type(value).__mro__)


def _metric_step_value(metric: Any) -> Tensor | None:
    """The value of the metric's last `forward` call; None when it was only `update`d."""
    cached = metric._forward_cache
    return cached.detach() if isinstance(cached, Tensor) else None


def infer_batch_size(batch: Any) -> int:
    """The first dimension of the first tensor found in the batch; 1 when there is none."""
    if isinstance(batch, Tensor):
        return batch.shape[0] if batch.ndim else 1
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, list | tuple):
        for item in batch:
            size = infer_batch_size(item)
            if size is not None:
                return size
    return 1


@dataclass
class _Entry:
    prog_bar: bool
    logger: bool
    on_step: bool
    on_epoch: bool
    reduction: str
    step_value: Tensor | None = None
    total: Tensor | None = None
    weight: float = 0.0
    metric: Any = None
    # the eval loader a batch hook logged this from, when there are several; None: it belongs to every loader
    dataloader_idx: int | None = None
    sync: bool = False  # reduce across ranks when the value is computed (sync_dist=True)
    sync_group: Any = None

    def accumulate(self, value: Tensor, batch_size: int) -> None:
        if self.total is None:
            self.total = value * batch_size if self.reduction == "mean" else value.clone()
            self.weight = batch_size
            return
        if self.reduction == "mean":
            self.total = self.total + value * batch_size
            self.weight += batch_size
        elif self.reduction == "sum":
            self.total = self.total + value
        elif self.reduction == "max":
            self.total = torch.maximum(self.total, value)
        else:
            self.total = torch.minimum(self.total, value)

    def epoch_value(self) -> Tensor | None:
        if self.metric is not None:
            return self.metric.compute() if self.metric.update_count else None
        if self.total is None:
            return None
        return self.total / self.weight if self.reduction == "mean" else self.total


def _synced_epoch_value(strategy: Any, entry: _Entry) -> Tensor | None:
    """The epoch value over every rank's batches: a mean is weighted by every rank's batch sizes."""
    if entry.total is None or not entry.on_epoch:
        return entry.epoch_value()
    if entry.reduction != "mean":
        return strategy.reduce(entry.total, entry.sync_group, entry.reduction)
    total = strategy.reduce(entry.total, entry.sync_group, "sum")
    weight = strategy.reduce(torch.tensor(float(entry.weight), device=total.device), entry.sync_group, "sum")
    return total / weight


class MetricsCollector:
    def __init__(self, trainer: Any):
        self.trainer = trainer
        # What each stage logged since its last reset, by name.
        self._buckets: dict[str, dict[str, _Entry]] = {"train": {}, "val": {}, "test": {}}
        self._callback: dict[str, Tensor] = {}
        self._logged: dict[str, Tensor] = {}
        self._progress: dict[str, float] = {}
        self.current_batch: Any = None
        self.dataloader_idx = 0
        self.num_dataloaders = 1
        self._batch_size_cache: tuple[int, int] = (0, 1)
        self._reduced_loaders: dict[str, int | None] = {}

    # ---- the views users read ---------------------------------------------------------------------------

    @property
    def callback_metrics(self) -> dict[str, Tensor]:
        """Finished values, plus the running epoch reduction of what the current stage logged so far."""
        live = dict(self._callback)
        bucket = self._current_bucket()
        if bucket is not None:
            for name, entry in bucket.items():
                value = entry.epoch_value()
                if entry.on_epoch and value is not None:
                    live[name] = value
        return live

    @property
    def logged_metrics(self) -> dict[str, Tensor]:
        return dict(self._logged)

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return dict(self._progress)

    # ---- logging ----------------------------------------------------------------------------------------

    def log(
        self,
        fx: str,
        name: str,
        value: Any,
        *,
        prog_bar: bool,
        logger: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: Any,
        enable_graph: bool,
        add_dataloader_idx: bool,
        batch_size: int | None,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        rank_zero_only: bool = False,
    ) -> None:
        if rank_zero_only and self.trainer.global_rank != 0:
            return  # only rank 0's value is logged, and it is not synced: the other ranks may not log it at all
        bucket = self._current_bucket()
        if bucket is None:
            raise MisconfigurationException(f"self.log({name!r}) is not allowed while predicting")
        step, epoch = _flags(fx, on_step, on_epoch)
        metric = value if _is_torchmetric(value) else None
        tensor = _metric_step_value(value) if metric is not None else _as_tensor(name, value, enable_graph)
        if add_dataloader_idx and self.num_dataloaders > 1 and fx not in _STEP_HOOKS:
            name = f"{name}/dataloader_idx_{self.dataloader_idx}"
        entry = bucket.get(name)
        if entry is None:
            entry = _Entry(prog_bar, logger, step, epoch, _reduction(reduce_fx), metric=metric)
            # torchmetrics objects sync themselves in compute(); plain values are reduced here.
            entry.sync = sync_dist and not rank_zero_only and metric is None and self.trainer.world_size > 1
            entry.sync_group = sync_dist_group
            if self.num_dataloaders > 1 and fx in _EVAL_BATCH_HOOKS:
                entry.dataloader_idx = self.dataloader_idx
            bucket[name] = entry
        if step and tensor is not None:
            entry.step_value = tensor
        if epoch and metric is None:
            entry.accumulate(tensor, batch_size if batch_size is not None else self._batch_size())

    def _batch_size(self) -> int:
        batch = self.current_batch
        if self._batch_size_cache[0] != id(batch):
            self._batch_size_cache = (id(batch), infer_batch_size(batch))
        return self._batch_size_cache[1]

    def _current_bucket(self) -> dict[str, _Entry] | None:
        stage = self.trainer.state.stage
        if stage is None:
            return None
        prefix = stage.dataloader_prefix
        if prefix == "predict":
            return None
        return self._buckets.get(prefix, self._buckets["train"])

    # ---- step and epoch boundaries ----------------------------------------------------------------------

    def step_end(self, bucket_name: str, step: int, send_to_loggers: bool) -> None:
        """After a batch: step values become visible; every `log_every_n_steps` they go to the loggers."""
        bucket = self._buckets[bucket_name]
        to_log: dict[str, Tensor] = {}
        for name, entry in bucket.items():
            if not entry.on_step or entry.step_value is None:
                continue
            if entry.sync:
                entry.step_value = self.trainer.strategy.reduce(entry.step_value, entry.sync_group, entry.reduction)
            key = f"{name}_step" if entry.on_epoch else name
            self._callback[key] = entry.step_value
            if entry.on_epoch:
                self._callback[name] = entry.step_value
            if entry.prog_bar:
                self._progress[key] = entry.step_value.item()
            if entry.logger:
                to_log[key] = entry.step_value
            entry.step_value = None
        if send_to_loggers and to_log:
            self._send(to_log, step)

    def epoch_end(self, bucket_name: str, step: int, send_to_loggers: bool) -> dict[str, Tensor]:
        """After an epoch's end hooks: reduce, publish and forget this stage's epoch values."""
        bucket = self._buckets[bucket_name]
        reduced: dict[str, Tensor] = {}
        self._reduced_loaders = {}
        to_log: dict[str, Tensor] = {}
        for name, entry in bucket.items():
            value = _synced_epoch_value(self.trainer.strategy, entry) if entry.sync else entry.epoch_value()
            if not entry.on_epoch or value is None:
                continue
            key = f"{name}_epoch" if entry.on_step else name
            reduced[name] = value
            self._reduced_loaders[name] = entry.dataloader_idx
            self._callback[name] = value
            self._callback[key] = value
            if entry.prog_bar:
                self._progress[key] = value.item()
            if entry.logger:
                to_log[key] = value
        for entry in bucket.values():
            if entry.metric is not None:
                entry.metric.reset()
        bucket.clear()
        if send_to_loggers and to_log:
            self._send(to_log, step)
        return reduced

    def _send(self, metrics: dict[str, Tensor], step: int) -> None:
        self._logged.update(metrics)
        trainer = self.trainer
        if not trainer.loggers:
            return
        scalars = {k: v.item() for k, v in metrics.items()}
        scalars.setdefault("epoch", trainer.current_epoch)
        for logger in trainer.loggers:
            logger.log_metrics(scalars, step=step)

    def reset_bucket(self, bucket_name: str) -> None:
        self._buckets[bucket_name].clear()

    def reset_all(self) -> None:
        for bucket in self._buckets.values():
            bucket.clear()
        self._callback.clear()
        self._progress.clear()

    def eval_results(self, reduced: Mapping[str, Tensor], num_dataloaders: int) -> list[dict[str, float]]:
        """One dict of numbers per loader: a value logged from one loader's batches belongs to that loader, with or
        without the `/dataloader_idx_N` suffix; one logged outside them (the epoch hooks) belongs to every loader."""
        results: list[dict[str, float]] = [{} for _ in range(num_dataloaders)]
        for name, value in reduced.items():
            number = value.item()
            head, marker, index = name.rpartition("/dataloader_idx_")
            loader = self._reduced_loaders.get(name)
            if loader is not None:
                targets: Any = [loader]
            else:
                targets = [int(index)] if marker and head else range(num_dataloaders)
            for target in targets:
                results[target][name] = number
        return results
