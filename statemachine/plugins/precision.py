"""Precision plugins (Lightning's `lightning.pytorch.plugins.precision`)."""

from devices.precision import DoublePrecision, FSDPPrecision, HalfPrecision, MixedPrecision, Precision

__all__ = ["DoublePrecision", "FSDPPrecision", "HalfPrecision", "MixedPrecision", "Precision"]
