"""`lightning.pytorch.core.mixins`: `save_hyperparameters` and `hparams` for your own classes."""

from stages.hparams import HyperparametersMixin

__all__ = ["HyperparametersMixin"]
