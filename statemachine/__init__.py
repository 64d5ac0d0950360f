"""statemachine: a PyTorch trainer with PyTorch Lightning's API whose control flow is one declarative machine.

Note: the import name `statemachine` is shared with the unrelated `python-statemachine` package; the two
cannot be installed in one environment.
"""

from stages.callbacks.callback import Callback
from stages.callbacks.early_stopping import EarlyStopping
from stages.callbacks.model_checkpoint import ModelCheckpoint
from stages.callbacks.model_summary import ModelSummary
from stages.callbacks.progress import ProgressBar, TQDMProgressBar
from stages.callbacks.timer import Timer
from stages.datamodule import LightningDataModule
from stages.exceptions import MisconfigurationException
from stages.loggers import CSVLogger, Logger, TensorBoardLogger
from stages.module import LightningModule
from stages.seed import seed_everything
from stages.training import SIGTERMException
from statemachine.enums import RunningStage, TrainerFn, TrainerState, TrainerStatus
from statemachine.history import History, load_history
from statemachine.machine import FlowError
from statemachine.table import TABLE
from statemachine.trainer import Trainer

__all__ = [
    "TABLE",
    "CSVLogger",
    "Callback",
    "EarlyStopping",
    "FlowError",
    "History",
    "LightningDataModule",
    "LightningModule",
    "Logger",
    "MisconfigurationException",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "RunningStage",
    "SIGTERMException",
    "TQDMProgressBar",
    "TensorBoardLogger",
    "Timer",
    "Trainer",
    "TrainerFn",
    "TrainerState",
    "TrainerStatus",
    "load_history",
    "seed_everything",
]
