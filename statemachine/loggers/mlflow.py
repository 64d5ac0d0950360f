"""`lightning.pytorch.loggers.mlflow`."""

from stages.loggers.mlflow import MLFlowLogger

__all__ = ["MLFlowLogger"]
