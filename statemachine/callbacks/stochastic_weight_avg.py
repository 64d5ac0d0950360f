"""`lightning.pytorch.callbacks.stochastic_weight_avg`."""

from stages.callbacks.stochastic_weight_avg import StochasticWeightAveraging

__all__ = ["StochasticWeightAveraging"]
