"""`lightning.pytorch.loggers.csv_logs`."""

from stages.loggers.csv_logs import CSVLogger, ExperimentWriter

__all__ = ["CSVLogger", "ExperimentWriter"]
