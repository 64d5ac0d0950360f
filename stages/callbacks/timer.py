"""Timer: measures train/validate/test time and asks the trainer to stop once a duration has passed."""

from __future__ import annotations

import logging
import re
import time
from datetime import timedelta
from typing import Any

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException

log = logging.getLogger(__name__)

_DURATION_STRING = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")
_TIMEDELTA_KEYS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
_STAGES = ("train", "validate", "test")
_INTERVALS = ("step", "epoch")


def parse_duration(value: str | timedelta | dict[str, float] | None) -> timedelta | None:
    """Reads a duration given as a timedelta, as timedelta keyword arguments, or as "DD:HH:MM:SS"."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return _parse_duration_string(value)
    if isinstance(value, dict):
        return _parse_duration_dict(value)
    raise TypeError(
        f"Duration {value!r} has type {type(value).__name__}; expected a datetime.timedelta, a dict of"
        ' timedelta arguments or a "DD:HH:MM:SS" string.'
    )


def _parse_duration_string(value: str) -> timedelta:
    match = _DURATION_STRING.fullmatch(value.strip())
    if match is None:
        raise ValueError(f'Duration {value!r} is not a valid duration string; expected "DD:HH:MM:SS".')
    days, hours, minutes, seconds = (int(part) for part in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def _parse_duration_dict(value: dict[str, float]) -> timedelta:
    try:
        return timedelta(**value)
    except TypeError as error:  # timedelta's own words first, as Lightning passes them on
        raise ValueError(f"{error} (duration {value!r}; allowed keys are {', '.join(_TIMEDELTA_KEYS)})") from None


class Timer(Callback):
    """Tracks the time spent in each stage; with a `duration`, sets `trainer.should_stop` when it is used up.

    The check runs at `on_fit_start` (a resumed run may already be out of time) and then after every training
    batch (`interval="step"`) or every training epoch (`interval="epoch"`). The trainer still applies
    `min_epochs`/`min_steps` before stopping.
    """

    def __init__(
        self,
        duration: str | timedelta | dict[str, float] | None = None,
        interval: str = "step",
        verbose: bool = True,
    ) -> None:
        if interval not in _INTERVALS:
            raise MisconfigurationException(
                f"Unsupported parameter value `Timer(interval={interval!r})`. Possible values are: "
                f"{', '.join(_INTERVALS)}."
            )
        parsed = parse_duration(duration)
        self._duration: float | None = parsed.total_seconds() if parsed is not None else None
        self._interval = _canonical(interval, _INTERVALS)
        self._verbose = verbose
        self._start_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        # Training time carried over from a checkpoint, so a resumed run continues the clock.
        self._offset = 0.0

    def start_time(self, stage: str = "train") -> float | None:
        """The `time.monotonic()` reading when `stage` last started, or None if it has not started."""
        return self._start_time[_check_stage(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        """The `time.monotonic()` reading when `stage` last ended, or None if it has not ended."""
        return self._end_time[_check_stage(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in `stage`'s latest run; for "train" plus the time restored from a checkpoint."""
        stage = _check_stage(stage)
        offset = self._offset if stage == "train" else 0.0
        start, end = self._start_time[stage], self._end_time[stage]
        if start is None:
            return offset
        return (end if end is not None else time.monotonic()) - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of the duration, or None without a duration."""
        if self._duration is None:
            return None
        return self._duration - self.time_elapsed(stage)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("train")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._end("train")

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("validate")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._end("validate")

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("test")

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self._end("test")

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._interval == "step" and self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = float(state_dict.get("time_elapsed", {}).get("train", 0.0))

    def _start(self, stage: str) -> None:
        self._start_time[stage] = time.monotonic()
        self._end_time[stage] = None

    def _end(self, stage: str) -> None:
        self._end_time[stage] = time.monotonic()

    def _check_time_remaining(self, trainer: Any) -> None:
        assert self._duration is not None
        out_of_time = self.time_elapsed("train") >= self._duration
        # Rank 0's clock decides, so no rank stops alone.
        out_of_time = bool(trainer.strategy.broadcast(out_of_time))
        trainer.should_stop = trainer.should_stop or out_of_time
        if out_of_time and self._verbose:
            elapsed = timedelta(seconds=int(self.time_elapsed("train")))
            log.info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")


def _check_stage(stage: str) -> str:
    if stage not in _STAGES:
        raise ValueError(f"Timer stage {stage!r} is not tracked; use one of {', '.join(_STAGES)}.")
    return _canonical(stage, _STAGES)


def _canonical(value: str, allowed: tuple[str, ...]) -> str:
    # A str enum such as RunningStage.TRAINING compares equal to its value; keep the plain value.
    return allowed[allowed.index(value)]
