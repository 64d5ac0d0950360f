"""`lightning.pytorch.loggers.logger`: the Logger contract, DummyLogger, and `rank_zero_experiment`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from stages.loggers.logger import DummyLogger, Logger, NoExperiment
from statemachine.utilities.rank_zero import rank_zero_only

__all__ = ["DummyLogger", "Logger", "rank_zero_experiment"]


def rank_zero_experiment(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Decorates a logger's `experiment` property body: rank zero creates the backend object, every other rank
    gets an experiment whose methods accept any call and do nothing."""

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        if rank_zero_only.rank != 0:
            return NoExperiment()
        return fn(self)

    return experiment
