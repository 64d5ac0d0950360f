"""`lightning.pytorch.loggers` under its own path: `from statemachine.loggers import TensorBoardLogger`."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "CometLogger": "stages.loggers.comet",
    "CSVLogger": "stages.loggers.csv_logs",
    "DummyLogger": "stages.loggers.logger",
    "Logger": "stages.loggers.logger",
    "MLFlowLogger": "stages.loggers.mlflow",
    "TensorBoardLogger": "stages.loggers.tensorboard",
    "WandbLogger": "stages.loggers.wandb",
}
_NOT_SUPPORTED = {
    "NeptuneLogger": "Neptune is not built; use MLFlowLogger, WandbLogger, CometLogger, TensorBoardLogger or CSVLogger",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
