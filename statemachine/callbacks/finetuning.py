"""`lightning.pytorch.callbacks.finetuning`."""

from stages.callbacks.finetuning import BackboneFinetuning, BaseFinetuning

__all__ = ["BackboneFinetuning", "BaseFinetuning"]
