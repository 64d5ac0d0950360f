"""The `fitting.setup` handler: the last step before fit runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.contract import module_of

if TYPE_CHECKING:
    from stages.contract import TrainerView


def run_fit_setup(trainer: TrainerView) -> str:
    """Start from clean gradients; the table's `begin` guards then choose sanity check or training."""
    trainer.strategy.barrier("run_stage")
    module_of(trainer).zero_grad()
    return "begin"
