"""`Tuner`: Lightning's entry point to the learning-rate and batch-size searches.

Each search is a run (a fit; or validate/test/predict for a batch size) that does only the search: the finder
callback goes first in the trainer's callbacks with `_early_exit` set, the run's setup goes as usual, the tuning
state searches and restores, and the run ends in `finished` (the teardown hooks run, `on_fit_end` does not).
The trainer's machine gains the tuning states for that run and keeps them (their edges are only taken when a
finder asks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from stages.exceptions import MisconfigurationException
from statemachine.engine.table import ENTRY_TRIGGERS
from statemachine.tuner.callbacks import BatchSizeFinder, LearningRateFinder, ScaleMode, _Finder
from statemachine.tuner.lr_finder import LRFinder, SweepMode

if TYPE_CHECKING:
    from stages.datamodule import LightningDataModule
    from stages.module import LightningModule
    from statemachine.trainer import Trainer

Method = Literal["fit", "validate", "test", "predict"]  # the table's ENTRY_TRIGGERS, for type checkers


class Tuner:
    """`Tuner(trainer).lr_find(model, ...)` and `.scale_batch_size(model, ...)`."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def lr_find(
        self,
        model: LightningModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        method: Method = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: SweepMode = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """Sweep the learning rate over `num_training` steps; the model and trainer are restored afterwards, and
        with `update_attr` the suggested rate is written to `attr_name` (or `lr` / `learning_rate`)."""
        if method != "fit":
            raise MisconfigurationException(f"method={method!r}: lr_find runs with method='fit' only")
        _check_loaders(method, train_dataloaders, val_dataloaders, dataloaders)
        finder = LearningRateFinder(
            min_lr=min_lr,
            max_lr=max_lr,
            num_training_steps=num_training,
            mode=mode,
            early_stop_threshold=early_stop_threshold,
            update_attr=update_attr,
            attr_name=attr_name,
        )
        self._search(finder, method, model, (train_dataloaders, val_dataloaders), datamodule)
        return finder.optimal_lr

    def scale_batch_size(
        self,
        model: LightningModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        method: Method = "fit",
        mode: ScaleMode = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
    ) -> int | None:
        """The largest batch size (from `init_val`, doubling; `binsearch` then bisects) whose trial of
        `steps_per_trial` steps runs without running out of memory; it is written to `batch_arg_name`."""
        if method not in ENTRY_TRIGGERS:
            raise ValueError(f"method={method!r}: expected one of {ENTRY_TRIGGERS}")
        _check_loaders(method, train_dataloaders, val_dataloaders, dataloaders)
        finder = BatchSizeFinder(
            mode=mode,
            steps_per_trial=steps_per_trial,
            init_val=init_val,
            max_trials=max_trials,
            batch_arg_name=batch_arg_name,
        )
        loaders = (train_dataloaders, val_dataloaders) if method == "fit" else (dataloaders,)
        self._search(finder, method, model, loaders, datamodule)
        return finder.optimal_batch_size

    def _search(
        self,
        finder: _Finder,
        method: Method,
        model: LightningModule,
        loaders: tuple[Any, ...],
        datamodule: LightningDataModule | None,
    ) -> None:
        trainer = self._trainer
        same = [type(c).__name__ for c in trainer.callbacks if isinstance(c, type(finder))]
        if same:
            raise ValueError(
                f"The trainer already has a {same[0]} callback; remove it to run this search with the Tuner"
            )
        finder._early_exit = True
        trainer.callbacks = [finder, *trainer.callbacks]
        try:
            getattr(trainer, method)(model, *loaders, datamodule=datamodule)
        finally:
            trainer.callbacks = [c for c in trainer.callbacks if c is not finder]


def _check_loaders(method: str, train_dataloaders: Any, val_dataloaders: Any, dataloaders: Any) -> None:
    if method == "fit" and dataloaders is not None:
        raise MisconfigurationException(
            "In the tuner with method='fit', `dataloaders` must be None: pass train_dataloaders and val_dataloaders"
        )
    if method != "fit" and (train_dataloaders is not None or val_dataloaders is not None):
        raise MisconfigurationException(
            f"In the tuner with method={method!r}, train_dataloaders and val_dataloaders must be None: pass dataloaders"
        )
