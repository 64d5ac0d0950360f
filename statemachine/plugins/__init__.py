"""Plugins a Trainer accepts through `plugins=` (Lightning's `lightning.pytorch.plugins`)."""

from statemachine.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision

__all__ = ["DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision"]
