"""What a module must provide for each entry point, checked before the run starts (as Lightning checks it)."""

from __future__ import annotations

import warnings
from typing import Any

from stages.data import has_loader_source
from stages.datamodule import LightningDataModule
from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.hooks import is_overridden
from stages.module import LightningModule


def check_fit(model: LightningModule, datamodule: LightningDataModule | None, val_dataloaders: Any) -> None:
    """`training_step` and `configure_optimizers` are required; a val loader without `validation_step` warns."""
    missing = [
        name for name in ("training_step", "configure_optimizers") if not is_overridden(name, model, LightningModule)
    ]
    if missing:
        raise MisconfigurationException(
            f"No {' or '.join(f'`{name}()`' for name in missing)} method defined on {type(model).__name__}: "
            "the Trainer needs at least `training_step()`, `train_dataloader()` and `configure_optimizers()` to fit"
        )
    if has_loader_source("val", val_dataloaders, datamodule, model) and not is_overridden(
        "validation_step", model, LightningModule
    ):
        warnings.warn(
            "You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.",
            TrainerWarning,
            stacklevel=3,
        )


def check_predict(model: LightningModule) -> None:
    """`predict_step` may keep its default, which calls `forward`; set to None it cannot run."""
    if model.predict_step is None:
        raise MisconfigurationException("`predict_step` cannot be None to run `Trainer.predict`")
    if not is_overridden("predict_step", model, LightningModule) and not is_overridden(
        "forward", model, LightningModule
    ):
        raise MisconfigurationException(
            f"`Trainer.predict` needs `predict_step()` or `forward()`; {type(model).__name__} defines neither"
        )
