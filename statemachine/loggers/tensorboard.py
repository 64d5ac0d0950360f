"""`lightning.pytorch.loggers.tensorboard`."""

from stages.loggers.tensorboard import TensorBoardLogger

__all__ = ["TensorBoardLogger"]
