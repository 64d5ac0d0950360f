"""`lightning.pytorch.core.optimizer`."""

from stages.optimization import LightningOptimizer

__all__ = ["LightningOptimizer"]
