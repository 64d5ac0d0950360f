"""A warning, once per run, when the training loss stops being finite."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from stages.exceptions import TrainerWarning

if TYPE_CHECKING:
    from stages.contract import TrainerView


class NonFiniteLossCheck:
    """Warns the first time a run backpropagates a NaN or infinite loss, naming the step.

    The loss is checked at logging steps (every `log_every_n_steps`) and on each epoch's last batch, on every
    device. Reading a loss waits for the device, so a check per batch would cost a demanding user real
    throughput; a diverged run's loss stays non-finite, so it is still caught within a logging interval, and
    a short epoch (or `log_every_n_steps=0`) is still checked once. Stopping on it stays the job of
    `EarlyStopping(check_finite=True)`.
    """

    def __init__(self, trainer: TrainerView):
        self.trainer = trainer
        self.warned = False

    def reset(self) -> None:
        self.warned = False

    def __call__(self, loss: Tensor) -> None:
        if self.warned:
            return
        loop = self.trainer.fit_loop
        if not (loop.is_last_batch or loop.should_log()):
            return
        if loss.numel() == 1:
            finite = math.isfinite(loss.item())  # a fraction of torch.isfinite's cost; item() needs no detach
        else:
            finite = bool(torch.isfinite(loss.detach()).all())
        if finite:
            return
        self.warned = True
        trainer = self.trainer
        value = f"{loss.detach().item()}" if loss.numel() == 1 else "not finite"
        # A gradient scaler (16-mixed) skips the update of a step whose gradients are not finite.
        harm = (
            "gradients; the gradient scaler skips this step's update"
            if trainer.strategy.precision.scaler is not None
            else "gradients and weights"
        )
        warnings.warn(
            f"The training loss is {value} at global step {trainer.global_step} (epoch {trainer.current_epoch}, "
            f"batch {trainer.fit_loop.batch_idx}): backpropagating it puts NaN or inf into the {harm}. "
            "Shown once per run; EarlyStopping(monitor=..., check_finite=True) stops training on a non-finite "
            "metric",
            TrainerWarning,
            stacklevel=2,
        )
