"""`lightning.pytorch.loggers.logger`: the Logger contract, DummyLogger, and `rank_zero_experiment`."""

from stages.loggers.logger import DummyLogger, Logger, rank_zero_experiment

__all__ = ["DummyLogger", "Logger", "rank_zero_experiment"]
