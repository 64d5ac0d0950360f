"""`lightning.pytorch.loggers.wandb`."""

from stages.loggers.wandb import WandbLogger

__all__ = ["WandbLogger"]
