"""`lightning.pytorch.callbacks.model_summary`."""

from stages.callbacks.model_summary import ModelSummary

__all__ = ["ModelSummary"]
