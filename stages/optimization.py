"""Optimizers and schedulers: `configure_optimizers` parsing, the wrapped optimizer, backward, stepping."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from devices.precision import StepClosure
from stages.contract import module_of, run_of
from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.loss_check import NonFiniteLossCheck

if TYPE_CHECKING:
    from stages.contract import TrainerView

_SCHEDULER_KEYS = {
    "scheduler",
    "name",
    "interval",
    "frequency",
    "monitor",
    "strict",
    "reduce_on_plateau",
    "opt_idx",
}


@dataclass
class LRSchedulerConfig:
    scheduler: Any
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool = False
    monitor: str | None = None
    strict: bool = True


class MultipleOptimizersError(MisconfigurationException, RuntimeError):
    """Several optimizers under automatic optimization (a RuntimeError, as in Lightning)."""


_UNKNOWN_CONFIGURATION = (
    "Unknown configuration for model optimizers. Output from `model.configure_optimizers()` should be one of:\n"
    " * `Optimizer`\n"
    " * [`Optimizer`]\n"
    " * ([`Optimizer`], [`LRScheduler`])\n"
    ' * {"optimizer": `Optimizer`, (optional) "lr_scheduler": `LRScheduler`}\n'
)


def _unknown_configuration(detail: str) -> MisconfigurationException:
    return MisconfigurationException(f"{_UNKNOWN_CONFIGURATION}Got {detail}.")


_TORCH_SCHEDULERS = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _is_plateau(scheduler: Any) -> bool:
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _scheduler_config(item: Any, monitor: str | None = None) -> LRSchedulerConfig:
    if not isinstance(item, Mapping):
        if _is_plateau(item) and monitor is None:
            raise MisconfigurationException(
                "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used. "
                'For example: {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "metric_to_track"}'
            )
        return LRSchedulerConfig(scheduler=item, reduce_on_plateau=_is_plateau(item), monitor=monitor)
    item = _known_scheduler_keys(item)
    if "scheduler" not in item:
        raise MisconfigurationException(
            'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler'
        )
    interval = item.get("interval", "epoch")
    if interval not in ("step", "epoch"):
        raise MisconfigurationException(
            f'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "{interval}"'
        )
    frequency = item.get("frequency", 1)
    if not isinstance(frequency, int) or frequency < 1:
        raise MisconfigurationException(f"lr_scheduler frequency={frequency!r} must be an int >= 1")
    plateau = item.get("reduce_on_plateau", _is_plateau(item["scheduler"]))
    if plateau and item.get("monitor") is None:
        raise MisconfigurationException(
            "The lr scheduler dict must include a monitor when a `ReduceLROnPlateau` scheduler is used. "
            'For example: {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "your_loss"}}'
        )
    return LRSchedulerConfig(
        scheduler=item["scheduler"],
        name=item.get("name"),
        interval=interval,
        frequency=frequency,
        reduce_on_plateau=plateau,
        monitor=item.get("monitor"),
        strict=item.get("strict", True),
    )


def _known_scheduler_keys(item: Mapping[str, Any]) -> dict[str, Any]:
    """The scheduler dict without the keys Lightning ignores (with its warning)."""
    extra = set(item) - _SCHEDULER_KEYS
    if extra:
        warnings.warn(
            f"Found unsupported keys in the lr scheduler dict: {extra}. HINT: remove them from the output of "
            "`configure_optimizers`.",
            RuntimeWarning,
            stacklevel=2,
        )
    return {key: value for key, value in item.items() if key in _SCHEDULER_KEYS}


def _from_dict(config: Mapping[str, Any]) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    extra = set(config) - {"optimizer", "lr_scheduler", "monitor"}
    if extra:
        warnings.warn(f"Found unsupported keys in the optimizer configuration: {extra}", RuntimeWarning, stacklevel=2)
    if "optimizer" not in config:
        raise _unknown_configuration(f"a dict without 'optimizer' (keys {sorted(config)})")
    schedulers = []
    if config.get("lr_scheduler") is not None:
        schedulers.append(_scheduler_config(config["lr_scheduler"], config.get("monitor")))
    return _checked([config["optimizer"]]), schedulers


def parse_optimizers(result: Any) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    """Every return form of `configure_optimizers`: optimizer, list, pair of lists, dicts."""
    if isinstance(result, Optimizer):
        return [result], []
    if isinstance(result, Mapping):
        return _from_dict(result)
    if isinstance(result, str) or not isinstance(result, Sequence) or not result:
        raise _unknown_configuration(repr(result) if isinstance(result, Sequence) else type(result).__name__)
    if len(result) == 2 and isinstance(result[0], list) and all(isinstance(x, Optimizer) for x in result[0]):
        schedulers = result[1] if isinstance(result[1], list) else [result[1]]
        return list(result[0]), [_scheduler_config(s) for s in schedulers]
    if all(isinstance(x, Mapping) for x in result):
        optimizers, configs = [], []
        for item in result:
            opts, scheds = _from_dict(item)
            optimizers += opts
            configs += scheds
        return optimizers, configs
    return _checked(list(result)), []


def _checked(optimizers: list[Any]) -> list[Optimizer]:
    bad = [type(o).__name__ for o in optimizers if not isinstance(o, Optimizer)]
    if bad:
        raise _unknown_configuration(f"non-optimizers: {bad}")
    return optimizers


def _check_schedulers(optimizers: list[Optimizer], configs: list[LRSchedulerConfig], steps_itself: bool) -> None:
    """Each scheduler is stateful, follows torch's API (unless the module steps schedulers itself) and drives a
    returned optimizer."""
    for config in configs:
        scheduler = config.scheduler
        name = type(scheduler).__name__
        if not callable(getattr(scheduler, "state_dict", None)) or not callable(
            getattr(scheduler, "load_state_dict", None)
        ):
            raise TypeError(
                f"The provided lr scheduler `{name}` is invalid. It should have `state_dict` and `load_state_dict` "
                "methods defined."
            )
        if not isinstance(scheduler, _TORCH_SCHEDULERS) and not steps_itself:
            raise MisconfigurationException(
                f"The provided lr scheduler `{name}` doesn't follow PyTorch's LRScheduler API. You should override "
                "the `LightningModule.lr_scheduler_step` hook with your own logic if you are using a custom LR "
                "scheduler."
            )
        if getattr(scheduler, "optimizer", None) not in optimizers:
            raise MisconfigurationException(
                "Some schedulers are attached with an optimizer that wasn't returned from `configure_optimizers`."
            )


def _nothing() -> None:
    """The closure of a manual `optimizer.step()` called without one: the user already ran backward."""


class NoOptimizer(Optimizer):
    """Stands in when `configure_optimizers` returns None: each step runs the closure and counts as a step, so
    the loop, its hooks and `global_step` behave as with a real optimizer, but no parameter changes."""

    def __init__(self) -> None:
        super().__init__([torch.zeros(1)], {})

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """There are no gradients of its own to clear."""

    def __repr__(self) -> str:
        return "No Optimizer"


class LightningOptimizer:
    """Wraps a torch optimizer so `step` runs the pre-step hooks and counts towards `global_step`. Built alone
    (`LightningOptimizer(optimizer)`, as in Lightning) it reads and clears like the optimizer; stepping needs the
    trainer's run, which gives the wrapper to the module."""

    def __init__(self, optimizer: Optimizer, optimization: Optimization | None = None):
        self.optimizer = optimizer
        self._optimization = optimization

    def __getattr__(self, name: str) -> Any:
        if name == "optimizer":
            raise AttributeError(name)  # not set yet (copy and pickle build the object empty): no recursion
        return getattr(self.optimizer, name)

    def __deepcopy__(self, memo: dict[int, Any]) -> LightningOptimizer:
        # the copy wraps a copy of the optimizer and steps through the same run
        return type(self)(copy.deepcopy(self.optimizer, memo), self._optimization)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        if self._optimization is None:
            raise RuntimeError(
                "LightningOptimizer.step() needs a trainer: this one was built alone; inside a run use "
                "self.optimizers(), or step the wrapped torch optimizer (.optimizer) yourself"
            )
        return self._optimization.step(self, closure, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()


class Optimization:
    """The trainer's optimizers and schedulers, and the backward and step paths both optimization modes share."""

    def __init__(self, trainer: TrainerView):
        self.trainer = trainer
        self.optimizers: list[Optimizer] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.lightning_optimizers: list[LightningOptimizer] = []
        self.check_loss = NonFiniteLossCheck(trainer)

    def setup(self, module: Any) -> None:
        returned = run_of(self.trainer).hooks.module("configure_optimizers")
        if returned is None:
            warnings.warn(
                "`LightningModule.configure_optimizers` returned `None`, this fit will run with no optimizer",
                TrainerWarning,
                stacklevel=2,
            )
            optimizers: list[Optimizer] = [NoOptimizer()]
            configs: list[LRSchedulerConfig] = []
        else:
            optimizers, configs = parse_optimizers(returned)
        if module.automatic_optimization and len(optimizers) > 1:
            raise MultipleOptimizersError(
                "Training with multiple optimizers is only supported with manual optimization. Set "
                "`self.automatic_optimization = False`, then access your optimizers in `training_step` with "
                f"`opt1, opt2, ... = self.optimizers()`. (configure_optimizers returned {len(optimizers)})"
            )
        hooks = run_of(self.trainer).hooks
        steps_itself = not module.automatic_optimization or hooks.module_overrides("lr_scheduler_step")
        _check_schedulers(optimizers, configs, steps_itself)
        self.optimizers = optimizers
        self.lr_scheduler_configs = configs
        self.lightning_optimizers = [LightningOptimizer(o, self) for o in optimizers]
        self.trainer.strategy.optimizers_to_device(optimizers)
        self.check_loss.reset()

    def run_backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        self.check_loss(loss)
        hooks = run_of(self.trainer).hooks
        # A gradient scaler multiplies the loss first: the backward hooks see what is backpropagated.
        loss = self.trainer.strategy.precision.pre_backward(loss)
        hooks.callbacks("on_before_backward", loss)
        hooks.module("on_before_backward", loss)
        hooks.module("backward", self.trainer.strategy.loss_for_backward(loss), *args, **kwargs)
        hooks.callbacks("on_after_backward")
        hooks.module("on_after_backward")

    def step(self, wrapped: LightningOptimizer, closure: Callable[[], Any] | None, **kwargs: Any) -> Any:
        """The optimizer update: closure, then the pre-step hooks (and clipping when automatic), then update."""
        trainer = self.trainer
        optimizer = wrapped.optimizer

        module = module_of(trainer)

        def before_update() -> None:
            hooks = run_of(trainer).hooks
            hooks.callbacks("on_before_optimizer_step", optimizer)
            hooks.module("on_before_optimizer_step", optimizer)
            clipping = trainer.gradient_clip_val or hooks.module_overrides("configure_gradient_clipping")
            if module.automatic_optimization and clipping:
                hooks.module(
                    "configure_gradient_clipping",
                    optimizer,
                    gradient_clip_val=trainer.gradient_clip_val,
                    gradient_clip_algorithm=trainer.gradient_clip_algorithm,
                )

        # The precision decides what happens between the two parts (a gradient scaler unscales there).
        step_closure = StepClosure(closure or _nothing, before_update, automatic=module.automatic_optimization)
        output = trainer.strategy.optimizer_step(optimizer, step_closure, **kwargs)
        trainer.fit_loop.on_optimizer_stepped()
        return output

    def step_schedulers(self, interval: str, index: int, plateau: bool) -> None:
        """Step the schedulers of `interval` whose frequency divides `index` (`batch_idx+1` or `epoch+1`)."""
        for config in self.lr_scheduler_configs:
            if config.interval != interval or config.reduce_on_plateau != plateau or index % config.frequency:
                continue
            metric = None
            if config.reduce_on_plateau:
                metric = self._monitored(config)
                if metric is None:
                    continue
            progress = self.trainer.fit_loop.scheduler_progress
            progress.increment_ready()
            run_of(self.trainer).hooks.module("lr_scheduler_step", config.scheduler, metric)
            progress.increment_completed()

    def _monitored(self, config: LRSchedulerConfig) -> Any:
        metrics = self.trainer.callback_metrics
        if config.monitor in metrics:
            return metrics[config.monitor]
        message = (
            f"ReduceLROnPlateau conditioned on metric {config.monitor!r}, which is not available. "
            f"Available metrics are: {sorted(metrics)}"
        )
        if config.strict:
            raise MisconfigurationException(message + ". Set strict=False in the scheduler config to skip instead")
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return None

    def state_dicts(self, module: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        strategy = self.trainer.strategy
        optimizers = [strategy.optimizer_state_dict(module, o) for o in self.optimizers]
        schedulers = [c.scheduler.state_dict() for c in self.lr_scheduler_configs]
        return optimizers, schedulers

    def load_state_dicts(
        self, module: Any, optimizer_states: list[dict[str, Any]], scheduler_states: list[dict[str, Any]]
    ) -> None:
        if len(optimizer_states) != len(self.optimizers):
            raise ValueError(
                f"the checkpoint has {len(optimizer_states)} optimizer states but configure_optimizers returned "
                f"{len(self.optimizers)} optimizers"
            )
        for optimizer, state in zip(self.optimizers, optimizer_states):
            self.trainer.strategy.load_optimizer_state_dict(module, optimizer, state)
        self.trainer.strategy.optimizers_to_device(self.optimizers)
        for config, state in zip(self.lr_scheduler_configs, scheduler_states):
            config.scheduler.load_state_dict(state)
