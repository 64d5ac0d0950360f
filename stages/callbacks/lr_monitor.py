"""LearningRateMonitor: logs each optimizer parameter group's learning rate (and optionally momentum and weight
decay) under Lightning's names: `lr-Adam`, `lr-SGD/pg1`, `lr-Adam-1`, or the scheduler config's `name`."""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import torch
from torch.optim import Optimizer

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException

_INTERVALS = (None, "step", "epoch")


class LearningRateMonitor(Callback):
    """`logging_interval="step"` logs every `log_every_n_steps` optimizer steps, `"epoch"` at each epoch start,
    None follows each scheduler's own interval. Optimizers without a scheduler are logged at every logging
    point. The values also appear in `trainer.callback_metrics`; `lrs` keeps every learning rate logged."""

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        if logging_interval not in _INTERVALS:
            raise MisconfigurationException(
                f"logging_interval={logging_interval!r} should be 'step' or 'epoch' or None"
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use the LearningRateMonitor callback with a Trainer that has no logger"
            )
        if self.log_momentum and _some_lack("momentum", trainer) and _some_lack("betas", trainer):
            warnings.warn(
                "log_momentum=True, but some optimizers do not have momentum; their momentum is logged as 0",
                RuntimeWarning,
                stacklevel=2,
            )
        names = [name for _, group_names, _ in _named_optimizers(trainer) for name in group_names]
        self.lrs = {name: [] for name in names}
        self.last_momentum_values = {f"{name}-momentum": None for name in names}
        self.last_weight_decay_values = {f"{name}-weight_decay": None for name in names}

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.logging_interval == "epoch" or not trainer.fit_loop.should_log():
            return
        self._log(trainer, "step" if self.logging_interval is None else "any")

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.logging_interval == "step":
            return
        self._log(trainer, "epoch" if self.logging_interval is None else "any")

    def _log(self, trainer: Any, interval: str) -> None:
        stats = self._collect(trainer, interval)
        if not stats:
            return
        device = trainer.strategy.root_device
        values = {name: torch.tensor(value, device=device) for name, value in stats.items()}
        trainer.run.metrics.publish(values, to_callbacks=True, to_logged=False)
        for logger in trainer.loggers:
            logger.log_metrics(stats, step=trainer.fit_loop.batches_that_stepped)

    def _collect(self, trainer: Any, interval: str) -> dict[str, float]:
        stats: dict[str, float] = {}
        for optimizer, names, config in _named_optimizers(trainer):
            self._carry_history(names)
            if config is not None and interval not in (config.interval, "any"):
                continue
            betas = "betas" in optimizer.defaults
            for group, name in zip(optimizer.param_groups, names):
                stats[name] = group["lr"]
                self.lrs[name].append(group["lr"])
                if self.log_momentum:
                    momentum = group["betas"][0] if betas else group.get("momentum", 0)
                    stats[f"{name}-momentum"] = self.last_momentum_values[f"{name}-momentum"] = momentum
                if self.log_weight_decay:
                    decay = group["weight_decay"]
                    stats[f"{name}-weight_decay"] = self.last_weight_decay_values[f"{name}-weight_decay"] = decay
        return stats

    def _carry_history(self, names: list[str]) -> None:
        """An optimizer that gained a group (fine-tuning) renames `lr-X` to `lr-X/pg1`; its history moves along."""
        for name in names:
            if name.endswith("/pg1") and name[: -len("/pg1")] in self.lrs:
                self.lrs[name] = self.lrs.pop(name[: -len("/pg1")])
            self.lrs.setdefault(name, [])


def _some_lack(key: str, trainer: Any) -> bool:
    configs = trainer.lr_scheduler_configs
    optimizers = [c.scheduler.optimizer for c in configs] if configs else trainer.optimizers
    return any(key not in optimizer.defaults for optimizer in optimizers)


def _named_optimizers(trainer: Any) -> list[tuple[Optimizer, list[str], Any]]:
    """(optimizer, one name per param group, its scheduler config or None): scheduled optimizers first."""
    unnamed_per_class: Counter[type] = Counter()
    seen: list[Optimizer] = []
    found: list[tuple[Optimizer, list[str], Any]] = []
    entries = [(c.scheduler.optimizer, c) for c in trainer.lr_scheduler_configs]
    entries += [(getattr(o, "optimizer", o), None) for o in trainer.optimizers]
    for optimizer, config in entries:
        if config is None and any(optimizer is other for other in seen):
            continue
        seen.append(optimizer)
        cls = type(optimizer)
        given = None if config is None else config.name
        if given is None:
            unnamed_per_class[cls] += 1
        base = given if given is not None else f"lr-{cls.__name__}"
        # several unnamed optimizers of one class are told apart by a counter after the first
        if unnamed_per_class[cls] > 1:
            base = f"{base}-{unnamed_per_class[cls] - 1}"
        found.append((optimizer, _group_names(optimizer, base), config))
    return found


def _group_names(optimizer: Optimizer, base: str) -> list[str]:
    groups = optimizer.param_groups
    labels = [group.get("name", f"pg{index}") for index, group in enumerate(groups, start=1)]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise MisconfigurationException(
            f"A single optimizer cannot have several parameter groups with the same name: {base} has {repeated}"
        )
    if len(groups) > 1:
        return [f"{base}/{label}" for label in labels]
    named = groups[0].get("name")
    return [f"{base}/{named}" if named else base]
