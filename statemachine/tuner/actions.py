"""The tuning states' guards, handlers and transition callbacks (named in `statemachine.tuner.table`).

The edge into a tuning state saves the model and trainer state (a checkpoint held in memory, plus what a
checkpoint does not hold: the callback and logger lists, the limits, the fit loop's position and the RNG);
every edge out restores it, so the search leaves no trace but the value it found.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import torch

from stages import rng
from stages.exceptions import MisconfigurationException
from statemachine import checkpoint
from statemachine.engine.enums import TrainerFn
from statemachine.tuner.callbacks import BatchSizeFinder, LearningRateFinder, _Finder
from statemachine.tuner.search import batch_size_search, lr_search

if TYPE_CHECKING:
    from statemachine.run import Run

_LIMITS = (
    "max_steps",
    "max_epochs",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "should_stop",
)
_RUN_OPTIONS = ("verbose", "return_predictions")
_PROGRESS = ("validate_progress", "test_progress", "predict_progress")


@dataclass
class _Search:
    finder: _Finder
    checkpoint: bytes
    rng: dict[str, Any]
    callbacks: list[Any]
    loggers: list[Any]
    limits: dict[str, Any]
    scheduler_configs: list[Any]
    loop: dict[str, Any]
    run_options: dict[str, Any]


_ACTIVE: WeakKeyDictionary[Any, _Search] = WeakKeyDictionary()


def _first_request(run: Run) -> _Finder | None:
    """The first finder (in callback order) that asked for a search in this run."""
    return next((c for c in run.callbacks if isinstance(c, _Finder) and c.requested_in(run)), None)


def _batch_size_finder(run: Run) -> BatchSizeFinder | None:
    return next((c for c in run.callbacks if isinstance(c, BatchSizeFinder)), None)


# ---- guards -----------------------------------------------------------------------------------------------


def lr_find_requested(run: Run) -> bool:
    """A LearningRateFinder asked for its sweep at fit start (and comes first)."""
    return isinstance(_first_request(run), LearningRateFinder)


def batch_size_search_requested(run: Run) -> bool:
    """A BatchSizeFinder asked for its search at fit start (and comes first)."""
    return isinstance(_first_request(run), BatchSizeFinder)


def batch_size_finder_present(run: Run) -> bool:
    """validate/test/predict: a BatchSizeFinder searches at the start of each."""
    return _batch_size_finder(run) is not None


def tuner_exits(run: Run) -> bool:
    """The search ran for the Tuner alone: the run ends once the state is restored."""
    return _ACTIVE[run.trainer].finder._early_exit


# ---- handlers ---------------------------------------------------------------------------------------------


def run_lr_find(run: Run) -> str:
    finder = _ACTIVE[run.trainer].finder
    assert isinstance(finder, LearningRateFinder)
    finder.optimal_lr = lr_search(run, finder)
    return "searched"


def run_scale_batch_size(run: Run) -> str:
    finder = _ACTIVE[run.trainer].finder
    assert isinstance(finder, BatchSizeFinder)
    finder.optimal_batch_size = batch_size_search(run, finder)
    return "searched"


# ---- callbacks --------------------------------------------------------------------------------------------


def save_tuning_state(run: Run) -> str:
    trainer = run.trainer
    finder = _first_request(run) if run.fn == TrainerFn.FITTING else _batch_size_finder(run)
    assert finder is not None, "the guard into a tuning state found a finder"
    if trainer.world_size > 1:  # every edge into a search passes here
        raise MisconfigurationException(
            f"{type(finder).__name__} is not supported in multi-process runs; tune on a single device"
        )
    finder._requested_run = None
    buffer = io.BytesIO()
    torch.save(checkpoint.dump(trainer, run.hooks, run.optimization, weights_only=False), buffer)
    loop = trainer.fit_loop.snapshot()
    loop.update({name: copy.deepcopy(getattr(trainer, name)) for name in _PROGRESS})
    _ACTIVE[run.trainer] = _Search(
        finder=finder,
        checkpoint=buffer.getvalue(),
        rng=rng.capture(),
        callbacks=list(trainer.callbacks),
        loggers=list(trainer.loggers),
        limits={name: getattr(trainer, name) for name in _LIMITS},
        scheduler_configs=list(run.optimization.lr_scheduler_configs),
        loop=loop,
        run_options={name: getattr(run, name) for name in _RUN_OPTIONS},
    )
    return f"saved the state before the search ({buffer.tell()} bytes)"


def restore_tuning_state(run: Run) -> str:
    trainer = run.trainer
    search = _ACTIVE.pop(trainer, None)
    if search is None:
        return "no search state to restore"
    trainer.callbacks = search.callbacks
    trainer.loggers = search.loggers
    for name, value in search.limits.items():
        setattr(trainer, name, value)
    run.optimization.lr_scheduler_configs = search.scheduler_configs
    run.hooks.reset()
    saved = torch.load(io.BytesIO(search.checkpoint), weights_only=False)
    checkpoint.restore_model_and_callbacks(run, saved, "the state saved before the search")
    checkpoint.restore_precision_and_optimizers(run, saved)
    for name in _PROGRESS:
        setattr(trainer, name, search.loop.pop(name))
    trainer.fit_loop.restore_snapshot(search.loop)
    for name, value in search.run_options.items():
        setattr(run, name, value)
    trainer.fit_validation.teardown()
    run.metrics.reset_all()
    rng.restore(search.rng)
    search.finder.after_restore(trainer)
    return "restored the state saved before the search"
