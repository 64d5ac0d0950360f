"""Precision plugins (Lightning's `lightning.pytorch.plugins.precision`)."""

from devices.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision

__all__ = ["DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision"]
