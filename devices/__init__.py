"""Hardware plane: accelerators, precision, strategies, checkpoint I/O.

The bottom layer: it imports nothing from `stages` or `statemachine`.
"""

from devices import checkpoint_io
from devices.accelerators import Accelerator, CPUAccelerator, CUDAAccelerator
from devices.checkpoint_io import CorruptCheckpointError, load_checkpoint, remove_checkpoint, save_checkpoint
from devices.connector import connect
from devices.ddp import DDPStrategy
from devices.environments import ClusterEnvironment, LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment
from devices.parallel import ParallelStrategy
from devices.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision, StepClosure, resolve_precision
from devices.strategy import SingleDeviceStrategy, Strategy
from devices.transfer import move_optimizer_state, move_to_device

__all__ = [
    "Accelerator",
    "CPUAccelerator",
    "CUDAAccelerator",
    "ClusterEnvironment",
    "CorruptCheckpointError",
    "DoublePrecision",
    "HalfPrecision",
    "MixedPrecision",
    "DDPStrategy",
    "LightningEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "ParallelStrategy",
    "Precision",
    "SingleDeviceStrategy",
    "StepClosure",
    "Strategy",
    "checkpoint_io",
    "connect",
    "load_checkpoint",
    "move_optimizer_state",
    "move_to_device",
    "remove_checkpoint",
    "resolve_precision",
    "save_checkpoint",
]
