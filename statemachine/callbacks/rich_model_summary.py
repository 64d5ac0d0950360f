"""`lightning.pytorch.callbacks.rich_model_summary`."""

from stages.callbacks.rich_model_summary import RichModelSummary

__all__ = ["RichModelSummary"]
