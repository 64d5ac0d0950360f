"""The `fitting.setup` handler: the last step before fit runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.contract import RunView


def run_fit_setup(run: RunView) -> str:
    """Start from clean gradients; the table's `begin` guards then choose sanity check or training."""
    run.trainer.strategy.barrier("run_stage")
    run.model.zero_grad()
    return "begin"
