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
    "BackboneFinetuning": "stages.callbacks.finetuning",
    "BaseFinetuning": "stages.callbacks.finetuning",
    "BasePredictionWriter": "stages.callbacks.prediction_writer",
    "DeviceStatsMonitor": "stages.callbacks.device_stats_monitor",
    "GradientAccumulationScheduler": "stages.callbacks.gradient_accumulation_scheduler",
    "LambdaCallback": "stages.callbacks.lambda_function",
    "LearningRateMonitor": "stages.callbacks.lr_monitor",
    "ModelPruning": "stages.callbacks.pruning",
    "OnExceptionCheckpoint": "stages.callbacks.on_exception_checkpoint",
    "RichModelSummary": "stages.callbacks.rich_model_summary",
    "RichProgressBar": "stages.callbacks.rich_progress",
    "StochasticWeightAveraging": "stages.callbacks.stochastic_weight_avg",
    "ThroughputMonitor": "stages.callbacks.throughput_monitor",
    "BatchSizeFinder": "statemachine.tuner.callbacks",
    "LearningRateFinder": "statemachine.tuner.callbacks",
}
_NOT_BUILT = "this callback is not built yet"
_NOT_SUPPORTED = {
    "SpikeDetection": _NOT_BUILT,
    "WeightAveraging": _NOT_BUILT,
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
