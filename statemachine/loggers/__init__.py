"""`lightning.pytorch.loggers` under its own path: `from statemachine.loggers import TensorBoardLogger`."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "CSVLogger": "stages.loggers.csv_logs",
    "DummyLogger": "stages.loggers.logger",
    "Logger": "stages.loggers.logger",
    "TensorBoardLogger": "stages.loggers.tensorboard",
}
_SERVICE = "loggers for hosted experiment services are not built; use TensorBoardLogger or CSVLogger"
_NOT_SUPPORTED = {
    "CometLogger": _SERVICE,
    "MLFlowLogger": _SERVICE,
    "NeptuneLogger": _SERVICE,
    "WandbLogger": _SERVICE,
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
