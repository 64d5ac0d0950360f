"""Loggers: the Logger contract and the TensorBoard and CSV implementations."""

from stages.loggers.csv_logs import CSVLogger
from stages.loggers.logger import DummyLogger, Logger
from stages.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "DummyLogger", "Logger", "TensorBoardLogger"]
