"""The `fitting.setup` handler: the last step before fit runs (reference 2.2 step 10)."""

from __future__ import annotations

from typing import Any


def run_fit_setup(trainer: Any) -> str:
    """Start from clean gradients; the table's `begin` guards then choose sanity check or training."""
    trainer.strategy.barrier("run_stage")
    trainer.lightning_module.zero_grad()
    return "begin"
