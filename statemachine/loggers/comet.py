"""`lightning.pytorch.loggers.comet`."""

from stages.loggers.comet import CometLogger

__all__ = ["CometLogger"]
