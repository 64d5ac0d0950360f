"""The learning-rate sweep's result: the (lr, loss) points, the suggested rate, and a plot of the curve."""

from __future__ import annotations

import logging
import math
from typing import Any, Literal, get_args

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from stages.callbacks.callback import Callback

_log = logging.getLogger(__name__)

SweepMode = Literal["exponential", "linear"]
SWEEP_MODES = get_args(SweepMode)


class LRFinder:
    """What `Tuner.lr_find` returns: `results` holds the swept rates (`"lr"`) and smoothed losses (`"loss"`)."""

    def __init__(self, mode: SweepMode, lr_min: float, lr_max: float, num_training: int):
        self.mode = mode
        self.lr_min = lr_min
        self.lr_max = lr_max
        self.num_training = num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._optimal_idx: int | None = None

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the loss falls fastest (the steepest negative slope of the smoothed curve), ignoring
        the first `skip_begin` and last `skip_end` points; None, with an error logged, when too few points
        remain."""
        losses = torch.tensor(self.results["loss"], dtype=torch.float64)
        end = len(losses) - skip_end
        index = torch.arange(len(losses))[skip_begin:end]
        index = index[torch.isfinite(losses[index])]
        if len(index) < 2:
            _log.error(
                "Failed to compute a learning rate suggestion: too few points. Increase num_training or the number "
                "of training batches, or lower skip_begin/skip_end"
            )
            self._optimal_idx = None
            return None
        steepest = int(torch.argmin(torch.gradient(losses[index])[0]))
        self._optimal_idx = int(index[steepest])
        return self.results["lr"][self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """The loss against the learning rate (log scale for an exponential sweep) as a matplotlib figure;
        `suggest` marks the suggested rate. Needs matplotlib (`pip install 'statemachine-trainer[plot]'`)."""
        try:
            import matplotlib.pyplot as plt
        except ModuleNotFoundError as missing:
            raise ModuleNotFoundError(
                "LRFinder.plot needs matplotlib, which is not installed: pip install 'statemachine-trainer[plot]'"
            ) from missing
        lrs, losses = self.results["lr"], self.results["loss"]
        figure, ax = plt.subplots() if ax is None else (ax.figure, ax)
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest and self.suggestion() is not None and self._optimal_idx is not None:
            ax.plot(lrs[self._optimal_idx], losses[self._optimal_idx], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return figure


class SweepLR(LRScheduler):
    """From each group's rate to `end_lr` over `num_iter` steps, geometrically or linearly."""

    def __init__(self, optimizer: Optimizer, end_lr: float, num_iter: int, mode: SweepMode):
        self.end_lr = end_lr
        self.num_iter = num_iter
        self.mode = mode
        super().__init__(optimizer)

    def get_lr(self) -> list[Any]:
        r = self.last_epoch / self.num_iter
        if self.mode == "exponential":
            return [base * (self.end_lr / base) ** r for base in self.base_lrs]
        return [base + r * (self.end_lr - base) for base in self.base_lrs]


class LossRecorder(Callback):
    """The only callback during a sweep: records each step's rate and smoothed loss, and stops the sweep once
    the loss diverges (above `early_stop_threshold` times the best so far, or not finite)."""

    beta = 0.98  # exponential smoothing of the loss, with bias correction

    def __init__(self, early_stop_threshold: float | None):
        self.early_stop_threshold = early_stop_threshold
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self._average = 0.0
        self._best = math.inf

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches == 0:
            self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches != 0:
            return
        if not outputs:  # training_step skipped the batch: no step, no point
            self.lrs.pop()
            return
        self._average = self.beta * self._average + (1 - self.beta) * float(outputs["loss"])
        smoothed = self._average / (1 - self.beta ** (len(self.losses) + 1))
        self.losses.append(smoothed)
        threshold = self.early_stop_threshold
        diverged = not math.isfinite(smoothed) or (
            threshold is not None and len(self.losses) > 1 and smoothed > threshold * self._best
        )
        if diverged:
            trainer.should_stop = True
        self._best = min(self._best, smoothed)
