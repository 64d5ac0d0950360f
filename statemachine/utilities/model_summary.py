"""`lightning.pytorch.utilities.model_summary`: the summary table as an object, and the count formatting."""

from __future__ import annotations

from torch import nn

from stages.callbacks.model_summary import Summary as ModelSummary
from stages.callbacks.model_summary import human_count as get_human_readable_count

__all__ = ["ModelSummary", "get_human_readable_count", "summarize"]


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """The summary of `lightning_module` down to `max_depth` levels; `print()` it for the table."""
    return ModelSummary(lightning_module, max_depth)
