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

from statemachine.callbacks import _EXPORTS as _CALLBACKS

# Every callback `statemachine.callbacks` exports is a top-level name too, as in Lightning.
_EXPORTS = {
    **_CALLBACKS,
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
    "RunningStage": "statemachine.engine.enums",
    "TrainerFn": "statemachine.engine.enums",
    "TrainerState": "statemachine.engine.enums",
    "TrainerStatus": "statemachine.engine.enums",
    "History": "statemachine.engine.history",
    "load_history": "statemachine.engine.history",
    "FlowError": "statemachine.engine.machine",
    "GuardSpec": "statemachine.engine.table",
    "MachineTable": "statemachine.engine.table",
    "StateSpec": "statemachine.engine.table",
    "TABLE": "statemachine.engine.table",
    "TransitionSpec": "statemachine.engine.table",
    "Trainer": "statemachine.trainer",
    "NotSupportedYetError": "statemachine._exports",
    "LIGHTNING_LOGO": "statemachine.utilities.logo",
    "cli_lightning_logo": "statemachine.utilities.logo",
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
