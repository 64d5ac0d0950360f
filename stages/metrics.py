"""`self.log`: per-hook defaults, step values, epoch reductions, and where each value goes.

`self.log` runs inside every step, so its path is kept short: the stage's bucket is cached by machine state,
values stay tensors (no `.item()`, so no device sync) until something really shows them, and an entry's
settings are resolved once, when the name is first logged in a stage.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import torch
from torch import Tensor

from stages.contract import run_of
from stages.exceptions import MisconfigurationException, TrainerWarning

if TYPE_CHECKING:
    from stages.contract import TrainerView

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
# Lightning also takes Python's own sum, max and min.
_TORCH_REDUCTIONS = {
    torch.mean: "mean",
    torch.sum: "sum",
    torch.max: "max",
    torch.min: "min",
    sum: "sum",
    max: "max",
    min: "min",
}


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
        raise MisconfigurationException(
            f"You can't `self.log()` inside `{fx}`. HINT: You can still log directly to the logger by using "
            "`self.logger.experiment`. (self.log works in the step and epoch hooks)"
        )
    step = defaults[0] if on_step is None else on_step
    epoch = defaults[1] if on_epoch is None else on_epoch
    return step, epoch


def _reduction(reduce_fx: Any) -> str:
    if isinstance(reduce_fx, str) and reduce_fx.lower() in _REDUCTIONS:
        return _REDUCTIONS[reduce_fx.lower()]
    if reduce_fx in _TORCH_REDUCTIONS:
        return _TORCH_REDUCTIONS[reduce_fx]
    raise MisconfigurationException(
        "Only `self.log(..., reduce_fx={min,max,mean,sum})` are supported. If you need a custom reduction, please "
        f"log a `torchmetrics.Metric` instance instead. Found: {reduce_fx}"
    )


def _as_tensor(fx: str, name: str, value: Any, keep_graph: bool, warned: set[tuple[str, str]]) -> Tensor:
    if isinstance(value, Tensor):
        if value.ndim:
            if value.numel() != 1:
                raise LogValueError(
                    f"`self.log({name}, {value})` was called, but the tensor must have a single element. You can try "
                    f"doing `self.log({name}, {value}.mean())` (its shape is {tuple(value.shape)})"
                )
            value = value.reshape(())
        if not keep_graph:
            value = value.detach()
        return value if value.is_floating_point() else _to_float(fx, name, value, warned)
    if isinstance(value, numbers.Number) and not isinstance(value, complex):
        return torch.tensor(float(cast(SupportsFloat, value)))  # numbers.Number declares no __float__; these have it
    raise LogValueError(
        f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged; log a number "
        "or a tensor of one element"
    )


def _to_float(fx: str, name: str, value: Tensor, warned: set[tuple[str, str]]) -> Tensor:
    """An integer or bool tensor is reduced as float32; said once per trainer, name and hook, as Lightning says it."""
    if (fx, name) not in warned:
        warned.add((fx, name))
        warnings.warn(
            f"You called `self.log({name!r}, ...)` in your `{fx}` but the value needs to be floating to be reduced. "
            "Converting it to torch.float32. You can silence this warning by converting the value to floating point "
            "yourself. If you don't intend to reduce the value (for instance when logging the global step or epoch) "
            f"then you can use `self.logger.log_metrics({{{name!r}: ...}})` instead.",
            TrainerWarning,
            stacklevel=4,
        )
    return value.float()


def _is_torchmetric(value: Any) -> bool:
    """A torchmetrics `Metric` (checked without importing torchmetrics, which is optional)."""
    return any(cls.__module__.startswith("torchmetrics") and cls.__name__ == "Metric" for cls in type(value).__mro__)


def _metric_step_value(metric: Any) -> Tensor | None:
    """The value of the metric's last `forward` call; None when it was only `update`d."""
    cached = metric._forward_cache
    return cached.detach() if isinstance(cached, Tensor) else None


def _forked_keys(name: str, on_step: bool, on_epoch: bool) -> tuple[str, str]:
    """With both flags the loggers get `x_step` and `x_epoch` (`x_epoch/dataloader_idx_1` with several eval
    loaders); otherwise the name itself."""
    if not (on_step and on_epoch):
        return name, name
    head, marker, index = name.partition("/dataloader_idx_")
    return f"{head}_step{marker}{index}", f"{head}_epoch{marker}{index}"


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
    # the names loggers see, `<name>_step`/`<name>_epoch` when logged on both (see `_forked_keys`)
    step_key: str = ""
    epoch_key: str = ""

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
    if entry.total is None:
        return entry.epoch_value()
    if entry.reduction != "mean":
        return strategy.reduce(entry.total, entry.sync_group, entry.reduction)
    total = strategy.reduce(entry.total, entry.sync_group, "sum")
    weight = strategy.reduce(torch.tensor(float(entry.weight), device=total.device), entry.sync_group, "sum")
    return total / weight


class MetricsCollector:
    def __init__(self, trainer: TrainerView):
        self.trainer = trainer
        # What each stage logged since its last reset, by name.
        self._buckets: dict[str, dict[str, _Entry]] = {"train": {}, "val": {}, "test": {}}
        self._callback: dict[str, Tensor] = {}
        self._logged: dict[str, Tensor] = {}
        self._progress: dict[str, Tensor] = {}  # tensors until read: reading syncs the device
        self._bucket_by_state: dict[str, dict[str, _Entry] | None] = {}
        self._flags_by_call: dict[tuple[str, bool | None, bool | None], tuple[bool, bool]] = {}
        self._syncing = False  # some value is logged with sync_dist in a multi-process run
        self._warned_not_floating: set[tuple[str, str]] = set()
        self.current_batch: Any = None
        self.dataloader_idx = 0
        self.num_dataloaders = 1
        self._batch_size_cache: tuple[int, int] = (0, 1)
        self._reduced_loaders: dict[str, int | None] = {}
        self._epoch_end_reached: str | None = None
        self._eval_batches_seen: dict[int, int] = {}

    # ---- the views users read ---------------------------------------------------------------------------

    # Lightning's rule: each view holds what was published at batch and epoch ends, merged on read with what the
    # running loop logged so far (its step values during a batch, its epoch values once its epoch end is reached).

    @property
    def callback_metrics(self) -> dict[str, Tensor]:
        return {**self._callback, **self._live_view()[0]}

    @property
    def logged_metrics(self) -> dict[str, Tensor]:
        return {**self._logged, **self._live_view()[1]}

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """Numbers, made from the stored tensors only here: the bar reads them when it shows them."""
        return {name: value.item() for name, value in {**self._progress, **self._live_view()[2]}.items()}

    def publish(self, values: Mapping[str, Tensor], *, to_callbacks: bool, to_logged: bool) -> None:
        """Values a callback computed itself (a learning rate, a throughput) and sent to the loggers: they join
        `callback_metrics` and/or `logged_metrics` as values published at a batch end do."""
        if to_callbacks:
            self._callback.update(values)
        if to_logged:
            self._logged.update(values)

    def adopt(self, callback_metrics: Mapping[str, Tensor], logged_metrics: Mapping[str, Tensor]) -> None:
        """The views of the process that ran the fit (a spawned rank 0) become this process's: its callback
        metrics replace these, its logged metrics join them."""
        self._callback = dict(callback_metrics)
        self._logged.update(logged_metrics)

    def epoch_end_reached(self, bucket_name: str) -> None:
        """The stage's batches are done: until `epoch_end` its views show epoch values, for its epoch-end hooks."""
        self._epoch_end_reached = bucket_name

    def _live_view(self) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
        bucket_name = self._current_bucket_name()
        if bucket_name is None:
            return {}, {}, {}
        if self._epoch_end_reached == bucket_name:
            return _epoch_view(self._buckets[bucket_name])
        return _step_view(self._buckets[bucket_name], bucket_name == "train")

    # ---- logging ----------------------------------------------------------------------------------------

    def log(
        self,
        state: str,
        fx: str,
        name: str,
        value: Any,
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
        """`self.log` in hook `fx` while the machine is in `state` (whose stage chooses where the value goes)."""
        if rank_zero_only and self.trainer.global_rank != 0:
            return  # only rank 0's value is logged, and it is not synced: the other ranks may not log it at all
        bucket = self._bucket_by_state[state] if state in self._bucket_by_state else self._bucket_for(state)
        if bucket is None:
            raise MisconfigurationException(
                "You are trying to `self.log()` but the loop's result collection is not registered yet. This is most "
                "likely because you are trying to log in a `predict` hook, but it doesn't support logging "
                f"(self.log({name!r}) while predicting)"
            )
        call = (fx, on_step, on_epoch)
        flags = self._flags_by_call.get(call)
        if flags is None:  # decided once per hook and flags: a step logs the same way every batch
            flags = self._flags_by_call[call] = _flags(fx, on_step, on_epoch)
        step, epoch = flags
        metric = None if isinstance(value, Tensor) or not _is_torchmetric(value) else value
        if metric is not None:
            tensor = _metric_step_value(value)
        elif type(value) is Tensor and not value.ndim and value.is_floating_point() and not enable_graph:
            tensor = value.detach()  # the usual value (a float scalar tensor) as _as_tensor takes it, without a call
        else:
            tensor = _as_tensor(fx, name, value, enable_graph, self._warned_not_floating)
        if add_dataloader_idx and self.num_dataloaders > 1 and fx not in _STEP_HOOKS:
            name = f"{name}/dataloader_idx_{self.dataloader_idx}"
        entry = bucket.get(name)
        if entry is None:
            step_key, epoch_key = _forked_keys(name, step, epoch)
            entry = _Entry(prog_bar, logger, step, epoch, _reduction(reduce_fx), metric=metric)
            entry.step_key, entry.epoch_key = step_key, epoch_key
            # torchmetrics objects sync themselves in compute(); plain values are reduced here.
            entry.sync = sync_dist and not rank_zero_only and metric is None and self.trainer.world_size > 1
            entry.sync_group = sync_dist_group
            self._syncing = self._syncing or entry.sync
            if self.num_dataloaders > 1 and fx in _EVAL_BATCH_HOOKS:
                entry.dataloader_idx = self.dataloader_idx
            bucket[name] = entry
        if step and tensor is not None:
            entry.step_value = tensor
        if epoch and metric is None and tensor is not None:
            entry.accumulate(tensor, batch_size if batch_size is not None else self._batch_size())

    def _batch_size(self) -> int:
        batch = self.current_batch
        if self._batch_size_cache[0] != id(batch):
            self._batch_size_cache = (id(batch), infer_batch_size(batch))
        return self._batch_size_cache[1]

    def _bucket_for(self, state: str) -> dict[str, _Entry] | None:
        """The bucket a machine state logs into (None: logging is not allowed there), cached per state."""
        stage = run_of(self.trainer).flow.table.by_name[state].stage
        prefix = None if stage is None else stage.dataloader_prefix
        bucket = None if prefix in (None, "predict") else self._buckets.get(prefix, self._buckets["train"])
        self._bucket_by_state[state] = bucket
        return bucket

    def _current_bucket_name(self) -> str | None:
        stage = self.trainer.state.stage  # the failed stage too, while on_exception hooks read the views
        if stage is None or stage.dataloader_prefix == "predict":
            return None
        return stage.dataloader_prefix if stage.dataloader_prefix in self._buckets else "train"

    # ---- step and epoch boundaries ----------------------------------------------------------------------

    def step_end(self, bucket_name: str, step: int | None, send_to_loggers: Callable[[], bool]) -> None:
        """After a batch: its step values are published; every `log_every_n_steps` they go to the loggers.

        `step` None: an evaluation batch, logged at its loader's own count of batches, as Lightning does.
        `send_to_loggers` is asked only when the batch logged something.
        """
        add_epoch = step is not None
        if step is None:
            step = self._eval_batches_seen.get(self.dataloader_idx, 0)
            self._eval_batches_seen[self.dataloader_idx] = step + 1
        bucket = self._buckets[bucket_name]
        if not bucket:
            return
        if self._syncing:
            self._sync_step_values(bucket)
        logged: dict[str, Tensor] = {}  # this batch's, for the loggers; the views get theirs in place
        _route_step_values(bucket, bucket_name == "train", self._callback, logged, self._progress, consume=True)
        self._logged.update(logged)
        if logged and send_to_loggers():
            self._send(logged, step, add_epoch)

    def _sync_step_values(self, bucket: dict[str, _Entry]) -> None:
        """Reduce this batch's `sync_dist` step values across ranks, once, before they are published."""
        strategy = self.trainer.strategy
        for entry in bucket.values():
            if entry.sync and entry.on_step and entry.step_value is not None:
                entry.step_value = strategy.reduce(entry.step_value, entry.sync_group, entry.reduction)

    def epoch_end(self, bucket_name: str, step: int, send_to_loggers: bool) -> dict[str, Tensor]:
        """After an epoch's end hooks: reduce, publish and forget this stage's epoch values. Returns what the
        loggers get (`x_epoch` for a value logged on both step and epoch), which `validate`/`test` return."""
        bucket = self._buckets[bucket_name]
        strategy = self.trainer.strategy
        callback, logged, progress = _epoch_view(bucket, partial(_synced_epoch_value, strategy))
        self._reduced_loaders = {
            entry.epoch_key: entry.dataloader_idx for entry in bucket.values() if entry.epoch_key in logged
        }
        self._callback.update(callback)
        self._logged.update(logged)
        self._progress.update(progress)
        for entry in bucket.values():
            if entry.metric is not None:
                entry.metric.reset()
        bucket.clear()
        self._epoch_end_reached = None
        if send_to_loggers and logged:
            self._send(logged, step)
        return logged

    def _send(self, metrics: dict[str, Tensor], step: int, add_epoch: bool = True) -> None:
        trainer = self.trainer
        if not trainer.loggers:
            return
        scalars = {k: v.item() for k, v in metrics.items()}
        if add_epoch:
            scalars.setdefault("epoch", trainer.current_epoch)
        for logger in trainer.loggers:
            logger.log_metrics(scalars, step=step)
            logger.save()

    def bucket(self, bucket_name: str) -> Mapping[str, object]:
        """The values logged into `bucket_name` since it was last reset: one dict, cleared in place, so a loop may
        hold it and ask per batch whether anything was logged."""
        return self._buckets[bucket_name]

    def reset_bucket(self, bucket_name: str) -> None:
        self._buckets[bucket_name].clear()

    def reset_all(self) -> None:
        """A run (or the sanity check) starts or ends: nothing logged before it shows in its views."""
        for bucket in self._buckets.values():
            bucket.clear()
        self._callback.clear()
        self._logged.clear()
        self._progress.clear()
        self._epoch_end_reached = None
        self._eval_batches_seen = {}

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


def _step_view(
    bucket: dict[str, _Entry], training: bool
) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
    """What the batch in flight logged on_step: loggers and the progress bar see it; callbacks only in training
    (evaluation step values never become callback metrics)."""
    callback: dict[str, Tensor] = {}
    logged: dict[str, Tensor] = {}
    progress: dict[str, Tensor] = {}
    _route_step_values(bucket, training, callback, logged, progress)
    return callback, logged, progress


def _route_step_values(
    bucket: dict[str, _Entry],
    training: bool,
    callback: dict[str, Tensor],
    logged: dict[str, Tensor],
    progress: dict[str, Tensor],
    consume: bool = False,
) -> None:
    """`_step_view`'s routing, into the given dicts. `consume`: the batch ended, forget its values."""
    for name, entry in bucket.items():
        value = entry.step_value
        if value is None or not entry.on_step:
            continue
        if consume:
            entry.step_value = None
        key = entry.step_key
        if entry.logger:
            logged[key] = value
        if training:
            callback[name] = callback[key] = value
        if entry.prog_bar:
            progress[key] = value


def _epoch_view(
    bucket: dict[str, _Entry], synced: Callable[[_Entry], Tensor | None] | None = None
) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
    """The epoch reductions so far: callbacks see `x` and `x_epoch`, loggers and the progress bar `x_epoch`.

    `synced` (at the epoch's end only: it runs collectives) gives a `sync_dist` value reduced over every rank.
    """
    callback: dict[str, Tensor] = {}
    logged: dict[str, Tensor] = {}
    progress: dict[str, Tensor] = {}
    for name, entry in bucket.items():
        if not entry.on_epoch:
            continue
        value = synced(entry) if synced is not None and entry.sync else entry.epoch_value()
        if value is None:
            continue
        key = entry.epoch_key
        callback[name] = callback[key] = value
        if entry.logger:
            logged[key] = value
        if entry.prog_bar:
            progress[key] = value
    return callback, logged, progress
