"""statemachine: a PyTorch trainer with PyTorch Lightning's API whose control flow is one declarative machine.

Use it as Lightning: `import statemachine as L`, then `L.Trainer`, `L.LightningModule`, ... Every import path of
`lightning.pytorch` has the same path here (`statemachine.callbacks`, `statemachine.loggers`, ...). The public names
and subpackages are imported on first use, so `import statemachine` (and its pytest plugin) stays fast.

Note: the import name `statemachine` is shared with the unrelated `python-statemachine` package; the two
cannot be installed in one environment.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "LightningDataModule": "stages.datamodule",
    "MisconfigurationException": "stages.exceptions",
    "PossibleUserWarning": "stages.exceptions",
    "CSVLogger": "stages.loggers",
    "DummyLogger": "stages.loggers",
    "Logger": "stages.loggers",
    "TensorBoardLogger": "stages.loggers",
    "LightningModule": "stages.module",
    "seed_everything": "stages.seed",
    "SIGTERMException": "stages.training",
    "RunningStage": "statemachine.enums",
    "TrainerFn": "statemachine.enums",
    "TrainerState": "statemachine.enums",
    "TrainerStatus": "statemachine.enums",
    "History": "statemachine.history",
    "load_history": "statemachine.history",
    "FlowError": "statemachine.machine",
    "GuardSpec": "statemachine.table",
    "MachineTable": "statemachine.table",
    "StateSpec": "statemachine.table",
    "TABLE": "statemachine.table",
    "TransitionSpec": "statemachine.table",
    "Trainer": "statemachine.trainer",
    "NotSupportedYetError": "statemachine._exports",
}
# Lightning's subpackages, reachable as attributes (`L.callbacks.ModelCheckpoint`) like `lightning.pytorch`'s
_SUBPACKAGES = frozenset(
    {
        "accelerators",
        "callbacks",
        "core",
        "demos",
        "loggers",
        "plugins",
        "profilers",
        "strategies",
        "trainer",
        "tuner",
        "utilities",
    }
)
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"statemachine.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'statemachine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | _SUBPACKAGES)
