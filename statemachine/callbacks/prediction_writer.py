"""`lightning.pytorch.callbacks.prediction_writer`."""

from stages.callbacks.prediction_writer import BasePredictionWriter

__all__ = ["BasePredictionWriter"]
