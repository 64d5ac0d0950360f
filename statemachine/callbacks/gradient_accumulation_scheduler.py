"""`lightning.pytorch.callbacks.gradient_accumulation_scheduler`."""

from stages.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler

__all__ = ["GradientAccumulationScheduler"]
