"""`lightning.pytorch.callbacks` under its own path: `from statemachine.callbacks import ModelCheckpoint`.

A callback becomes public with one line in `_EXPORTS`: its name and the module that defines it.
"""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "Callback": "stages.callbacks.callback",
    "Checkpoint": "stages.callbacks.callback",
    "EarlyStopping": "stages.callbacks.early_stopping",
    "ModelCheckpoint": "stages.callbacks.model_checkpoint",
    "ModelSummary": "stages.callbacks.model_summary",
    "ProgressBar": "stages.callbacks.progress",
    "TQDMProgressBar": "stages.callbacks.progress",
    "Timer": "stages.callbacks.timer",
}
_NOT_BUILT = "this callback is not built yet"
_NOT_SUPPORTED = {
    "BackboneFinetuning": _NOT_BUILT,
    "BaseFinetuning": _NOT_BUILT,
    "BasePredictionWriter": _NOT_BUILT,
    "BatchSizeFinder": "the batch size finder (tuner) is not built",
    "DeviceStatsMonitor": _NOT_BUILT,
    "GradientAccumulationScheduler": _NOT_BUILT,
    "LambdaCallback": _NOT_BUILT,
    "LearningRateFinder": "the learning rate finder (tuner) is not built",
    "LearningRateMonitor": _NOT_BUILT,
    "ModelPruning": _NOT_BUILT,
    "OnExceptionCheckpoint": _NOT_BUILT,
    "RichModelSummary": _NOT_BUILT,
    "RichProgressBar": _NOT_BUILT,
    "SpikeDetection": _NOT_BUILT,
    "StochasticWeightAveraging": _NOT_BUILT,
    "ThroughputMonitor": _NOT_BUILT,
    "WeightAveraging": _NOT_BUILT,
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
