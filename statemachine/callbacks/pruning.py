"""`lightning.pytorch.callbacks.pruning`."""

from stages.callbacks.pruning import ModelPruning

__all__ = ["ModelPruning"]
