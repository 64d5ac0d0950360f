"""EarlyStopping: asks the trainer to stop when a monitored metric stops improving or crosses a threshold."""

from __future__ import annotations

import logging
from enum import Enum
from typing import Any

import torch

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException

log = logging.getLogger(__name__)

_MODES = ("min", "max")


class EarlyStoppingReason(Enum):
    """Why EarlyStopping asked the trainer to stop (`stopping_reason`); the values are Lightning's, which a
    checkpoint stores."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Sets `trainer.should_stop` when `monitor` has not improved by more than `min_delta` for `patience`
    checks in a row, or when it crosses a threshold or stops being finite.

    It checks at `on_train_epoch_end` when `check_on_train_epoch_end` is True, else at `on_validation_end`.
    The default (None) becomes True when validation runs once per training epoch, at its end. It is inactive
    outside fit, during the sanity check and under fast_dev_run. The trainer applies min_epochs/min_steps.
    """

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        _validate_arguments(monitor, min_delta, patience, mode)
        _validate_threshold("stopping_threshold", stopping_threshold)
        _validate_threshold("divergence_threshold", divergence_threshold)
        self.monitor = monitor
        self.min_delta = float(min_delta)
        self.patience = patience
        self.verbose = verbose
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.log_rank_zero_only = log_rank_zero_only
        self._check_on_train_epoch_end = check_on_train_epoch_end
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = torch.tensor(torch.inf if mode == "min" else -torch.inf)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._check_on_train_epoch_end is None:
            # Validating several times per epoch, or not every epoch: only validation end sees fresh values.
            interval = 1.0 if trainer.val_check_interval is None else trainer.val_check_interval
            self._check_on_train_epoch_end = interval == 1.0 and trainer.check_val_every_n_epoch == 1

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._check_on_train_epoch_end and not _inactive(trainer):
            self._run_early_stopping_check(trainer)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not self._check_on_train_epoch_end and not _inactive(trainer):
            self._run_early_stopping_check(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = state_dict["wait_count"]
        self.stopped_epoch = state_dict["stopped_epoch"]
        self.best_score = state_dict["best_score"]
        self.patience = state_dict["patience"]
        # Checkpoints written before the reason was recorded have neither key.
        self.stopping_reason = EarlyStoppingReason(
            state_dict.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED.value)
        )
        self.stopping_reason_message = state_dict.get("stopping_reason_message")

    def _run_early_stopping_check(self, trainer: Any) -> None:
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            self._report_missing_metric(metrics)
            return
        current = torch.as_tensor(metrics[self.monitor]).detach().squeeze()
        should_stop, message = self._evaluate_stopping_criteria(current)
        # Every rank stops at the same batch: one rank wanting to stop is enough.
        should_stop = trainer.strategy.reduce_boolean_decision(should_stop, all=False)
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop:
            self.stopped_epoch = trainer.current_epoch
        if self.verbose and (trainer.is_global_zero or not self.log_rank_zero_only):
            log.info(message)

    def _report_missing_metric(self, metrics: dict[str, Any]) -> None:
        message = (
            f"Early stopping conditioned on metric `{self.monitor}` which is not available. Pass in or modify"
            " your `EarlyStopping` callback to use any of the following: " + ", ".join(f"`{key}`" for key in metrics)
        )
        if self.strict:
            raise RuntimeError(message)
        if self.verbose:
            log.warning(message)

    def _evaluate_stopping_criteria(self, current: torch.Tensor) -> tuple[bool, str]:
        """Returns whether to stop and a message saying why; updates best_score, wait_count and the reason."""
        if self.check_finite and not torch.isfinite(current):
            return self._stop(
                EarlyStoppingReason.NON_FINITE_METRIC,
                f"Monitored metric {self.monitor} = {current} is not finite. Previous best value was"
                f" {self.best_score:.3f}. Signaling Trainer to stop.",
            )
        if self.stopping_threshold is not None and self._better(current, self.stopping_threshold):
            sign = "<" if self.mode == "min" else ">"
            return self._stop(
                EarlyStoppingReason.STOPPING_THRESHOLD,
                f"Stopping threshold reached: {self.monitor} = {current} {sign} {self.stopping_threshold}."
                " Signaling Trainer to stop.",
            )
        if self.divergence_threshold is not None and self._better(self.divergence_threshold, current):
            sign = ">" if self.mode == "min" else "<"
            return self._stop(
                EarlyStoppingReason.DIVERGENCE_THRESHOLD,
                f"Divergence threshold reached: {self.monitor} = {current} {sign}"
                f" {self.divergence_threshold}. Signaling Trainer to stop.",
            )
        if self._improves(current):
            message = self._improvement_message(current)
            self.best_score = current
            self.wait_count = 0
            return False, message
        self.wait_count += 1
        message = f"Metric {self.monitor} did not improve. Wait count {self.wait_count}/{self.patience}."
        if self.wait_count >= self.patience:
            return self._stop(
                EarlyStoppingReason.PATIENCE_EXHAUSTED,
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records."
                f" Best score: {self.best_score:.3f}. Signaling Trainer to stop.",
            )
        return False, message

    def _stop(self, reason: EarlyStoppingReason, message: str) -> tuple[bool, str]:
        self.stopping_reason = reason
        self.stopping_reason_message = message
        return True, message

    def _better(self, a: torch.Tensor | float, b: torch.Tensor | float) -> bool:
        """Whether `a` is strictly better than `b` in this mode."""
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        return bool(torch.lt(a, b) if self.mode == "min" else torch.gt(a, b))

    def _improves(self, current: torch.Tensor) -> bool:
        """An improvement must beat the best score by more than min_delta."""
        shift = -self.min_delta if self.mode == "min" else self.min_delta
        return self._better(current, self.best_score.to(current.device) + shift)

    def _improvement_message(self, current: torch.Tensor) -> str:
        if torch.isfinite(self.best_score):
            return (
                f"Metric {self.monitor} improved by {abs(self.best_score - current):.3f} >="
                f" min_delta = {self.min_delta}. New best score: {current:.3f}"
            )
        return f"Metric {self.monitor} improved. New best score: {current:.3f}"


def _inactive(trainer: Any) -> bool:
    return trainer.state.fn != "fit" or trainer.sanity_checking or bool(trainer.fast_dev_run)


def _validate_arguments(monitor: str, min_delta: float, patience: int, mode: str) -> None:
    if not isinstance(monitor, str):
        raise TypeError(f"EarlyStopping(monitor={monitor!r}) must be the name of a logged metric (a str).")
    if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)) or min_delta < 0:
        raise ValueError(f"EarlyStopping(min_delta={min_delta!r}) must be a number >= 0.")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
        raise ValueError(f"EarlyStopping(patience={patience!r}) must be an int >= 0.")
    if mode not in _MODES:
        raise MisconfigurationException(f"`mode` can be {', '.join(_MODES)}, got {mode!r}")


def _validate_threshold(name: str, value: float | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TypeError(f"EarlyStopping({name}={value!r}) must be a number or None.")
