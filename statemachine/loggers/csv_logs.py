"""`lightning.pytorch.loggers.csv_logs`."""

from stages.loggers.csv_logs import CSVLogger

__all__ = ["CSVLogger"]
