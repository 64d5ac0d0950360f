"""`lightning.pytorch.utilities.types`: the type aliases Lightning code annotates its hooks with, and the path,
device and map-location aliases of `lightning.fabric.utilities.types` that trainer-side code imports."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Union

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from typing_extensions import NotRequired

from stages.optimization import LRSchedulerConfig

STEP_OUTPUT = Union[Tensor, Mapping[str, Any], None]  # noqa: UP007 - an alias users import, kept as Lightning spells it
_PATH = Union[str, Path]  # noqa: UP007
_DEVICE = Union[torch.device, str, int]  # noqa: UP007
# torch.load's map_location: a device, a {saved device: device} dict, or a function of (storage, saved location)
_MAP_LOCATION_TYPE = Union[_DEVICE, Callable[[Any, str], Any], dict[_DEVICE, _DEVICE], None]  # noqa: UP007
_PARAMETERS = Iterator[torch.nn.Parameter]
TRAIN_DATALOADERS = Any  # a loader, or any collection of loaders
EVAL_DATALOADERS = Any
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]  # noqa: UP007


class LRSchedulerConfigType(TypedDict):
    scheduler: LRSchedulerTypeUnion
    name: NotRequired[str | None]
    interval: NotRequired[str]
    frequency: NotRequired[int]
    reduce_on_plateau: NotRequired[bool]
    monitor: NotRequired[str | None]
    strict: NotRequired[bool]


class OptimizerLRSchedulerConfig(TypedDict):
    optimizer: Optimizer
    lr_scheduler: NotRequired[LRSchedulerTypeUnion | LRSchedulerConfigType]
    monitor: NotRequired[str]


OptimizerLRScheduler = Union[  # noqa: UP007
    Optimizer,
    Sequence[Optimizer],
    tuple[Sequence[Optimizer], Sequence[LRSchedulerTypeUnion | LRSchedulerConfigType]],
    OptimizerLRSchedulerConfig,
    Sequence[OptimizerLRSchedulerConfig],
    None,
]

__all__ = [
    "EVAL_DATALOADERS",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerTypeUnion",
    "OptimizerLRScheduler",
    "OptimizerLRSchedulerConfig",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
]
