"""The two searches, run by the tuning states' handlers: a learning-rate sweep and a batch-size search.

Both run real training steps through the fit loop, with only their own callback and no logger, so nothing the
user set up (checkpoints, early stopping, logs) sees them; the tuning state's exit edge restores the rest.
"""

from __future__ import annotations

import gc
import logging
import warnings
from collections.abc import Callable, Sized
from typing import TYPE_CHECKING, Any

import torch

from stages import data
from stages.callbacks.callback import Callback
from stages.contract import TrainerView
from stages.evaluation import run_test, run_validate
from stages.exceptions import MisconfigurationException, PossibleUserWarning, TrainerWarning
from stages.loggers import DummyLogger
from stages.optimization import LRSchedulerConfig
from stages.prediction import run_predict
from statemachine.guards import fit_done
from statemachine.tuner.attributes import lightning_hasattr, lightning_setattr, lr_attribute
from statemachine.tuner.lr_finder import LossRecorder, LRFinder, SweepLR

if TYPE_CHECKING:
    from statemachine.run import Run
    from statemachine.tuner.callbacks import BatchSizeFinder, LearningRateFinder

_log = logging.getLogger(__name__)

# ---- shared -----------------------------------------------------------------------------------------------


def isolate(run: Run, callbacks: list[Callback]) -> None:
    """Only the search's own callback runs, and nothing reaches the loggers."""
    trainer = run.trainer
    trainer.callbacks = callbacks
    if trainer.loggers:
        trainer.loggers = [DummyLogger()]
    trainer.should_stop = False
    run.hooks.reset()


def load_training_data(trainer: TrainerView) -> None:
    # The fit reloads its data after the search and warns about it there, where the warnings are about the run.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PossibleUserWarning)
        trainer.fit_loop.load_train_data()


def skipped_for_fast_dev_run(trainer: TrainerView, what: str) -> bool:
    if trainer.fast_dev_run:
        warnings.warn(f"Skipping the {what} since fast_dev_run is enabled", TrainerWarning, stacklevel=3)
    return bool(trainer.fast_dev_run)


# ---- learning rate ----------------------------------------------------------------------------------------


def lr_search(run: Run, finder: LearningRateFinder) -> LRFinder | None:
    """Sweep the rate from `min_lr` to `max_lr` over `num_training` steps, recording the smoothed loss."""
    trainer = run.trainer
    if skipped_for_fast_dev_run(trainer, "learning rate finder"):
        return None
    model = trainer.lightning_module
    assert model is not None, "the search runs inside fit"
    optimization = run.optimization
    if not model.automatic_optimization:
        raise MisconfigurationException("the learning rate finder needs automatic optimization")
    if len(optimization.optimizers) != 1:
        raise MisconfigurationException(
            f"configure_optimizers returned {len(optimization.optimizers)} optimizers; the learning rate finder "
            "works with a single optimizer"
        )
    optimizer = optimization.optimizers[0]
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = finder.min_lr
    sweep = SweepLR(optimizer, finder.max_lr, finder.num_training, finder.mode)
    optimization.lr_scheduler_configs = [LRSchedulerConfig(sweep, interval="step")]
    recorder = LossRecorder(finder.early_stop_threshold)
    isolate(run, [recorder])
    start = trainer.global_step
    # `num_training` steps, across epochs when the loader is shorter: only the step count bounds the sweep.
    trainer.max_steps, trainer.max_epochs = start + finder.num_training, -1
    load_training_data(trainer)
    while not fit_done(run):
        trainer.fit_loop.run_epoch()
    steps = trainer.global_step - start
    if steps < finder.num_training:
        _log.info("The learning rate finder stopped after %d steps (diverging loss, or the data ran out)", steps)
    result = LRFinder(finder.mode, finder.min_lr, finder.max_lr, finder.num_training)
    result.results = {"lr": recorder.lrs, "loss": recorder.losses}
    lr = result.suggestion()
    if finder.update_attr and lr is not None:
        lightning_setattr(model, lr_attribute(model, finder.attr_name), lr)
        _log.info("Learning rate set to %s", lr)
    return result


# ---- batch size -------------------------------------------------------------------------------------------


def is_oom_error(error: BaseException) -> bool:
    """Out of memory: torch's error type, or the messages older CUDA, cuDNN and the CPU allocator raise."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    if not isinstance(error, RuntimeError) or len(error.args) != 1 or not isinstance(error.args[0], str):
        return False
    message = error.args[0]
    return (
        ("CUDA" in message and "out of memory" in message)
        or "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED" in message
        or "DefaultCPUAllocator: can't allocate memory" in message
    )


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def batch_size_search(run: Run, finder: BatchSizeFinder) -> int | None:
    """Grow the batch size from `init_val` until a trial runs out of memory (or the dataset is exhausted); the
    largest size whose trial ran is written to `batch_arg_name` and returned. A trial is `steps_per_trial`
    training steps (fit), or that many batches of the run's own stage (validate, test, predict)."""
    trainer = run.trainer
    if skipped_for_fast_dev_run(trainer, "batch size finder"):
        return None
    model = trainer.lightning_module
    name = finder.batch_arg_name
    stage = trainer.state.stage
    assert stage is not None, "a tuning state runs as a stage"
    kind = stage.dataloader_prefix  # train, val, test or predict: the loaders a trial reads
    if run.loaders.get(kind) is not None:
        raise MisconfigurationException(
            "The batch size finder cannot be used with dataloaders passed directly to the trainer: it rebuilds the "
            "loaders at each size, so they must come from the LightningModule or LightningDataModule"
        )
    if not lightning_hasattr(model, name):
        raise MisconfigurationException(f"Field {name!r} not found in the model, the datamodule, nor their hparams")
    isolate(run, [])
    run_stage = _trial_runner(run, kind, finder.steps_per_trial)
    tried: list[int] = []

    def trial(size: int) -> BaseException | None:
        tried.append(size)
        lightning_setattr(model, name, size)
        try:
            run_stage()
        except RuntimeError as error:
            if not is_oom_error(error):
                raise
            _free_memory()
            _log.info("Batch size %d failed: out of memory", size)
            return error
        return None

    search = _power if finder.mode == "power" else _binsearch
    found, error = search(trial, lambda size: _capped(trainer, kind, size), finder.init_val, finder.max_trials)
    if found is None:
        assert error is not None
        error.add_note(f"the batch size finder found no batch size that fits (tried {tried})")
        raise error
    lightning_setattr(model, name, found)
    _log.info("Finished the batch size search; the run continues with %s=%d", name, found)
    return found


Trial = Callable[[int], BaseException | None]


def _power(trial: Trial, cap: Callable[[int], int], size: int, max_trials: int) -> tuple[int | None, Any]:
    """Double while trials run; after a failure, halve (stopping at once if a smaller size already ran)."""
    best, error = None, None
    for _ in range(max_trials):
        error = trial(size)
        if error is None:
            best, grown = size, cap(size * 2)
            if grown == size:
                break
            size = grown
        elif best is not None or size == 1:
            break
        else:
            size //= 2
    return best, error


def _binsearch(trial: Trial, cap: Callable[[int], int], size: int, max_trials: int) -> tuple[int | None, Any]:
    """Double until a trial fails, then bisect between the largest size that ran and the smallest that failed."""
    low, high, error = 0, None, None
    for _ in range(max_trials):
        error = trial(size)
        if error is None:
            low = size
            following = cap(size * 2) if high is None else (low + high) // 2
        else:
            high = size
            following = (low + high) // 2
        if following in (low, size) or following < 1:
            break
        size = following
    return (low or None), error


_STAGES = {"val": run_validate, "test": run_test, "predict": run_predict}


def _trial_runner(run: Run, kind: str, steps: int) -> Callable[[], None]:
    """One trial: `steps` training steps through the fit loop, or `steps` batches of the stage's own handler."""
    trainer = run.trainer
    if kind == "train":
        trainer.limit_train_batches = 1.0

        def train() -> None:
            trainer.max_steps = trainer.global_step + steps
            load_training_data(trainer)
            trainer.fit_loop.run_epoch()

        return train
    setattr(trainer, f"limit_{kind}_batches", steps)
    run.verbose = run.return_predictions = False
    handler = _STAGES[kind]

    def evaluate() -> None:
        handler(run)
        if len(data.as_list(_loaders(trainer, kind))) > 1:
            raise MisconfigurationException(f"The batch size finder cannot be used with several {kind} dataloaders")

    return evaluate


def _loaders(trainer: TrainerView, kind: str) -> Any:
    return trainer.train_dataloader if kind == "train" else getattr(trainer, f"{kind}_dataloaders")


def _capped(trainer: TrainerView, kind: str, size: int) -> int:
    """A batch larger than the dataset cannot grow any more (a dataset without a length does not cap it)."""
    loaders = data.as_list(_loaders(trainer, kind))
    dataset = getattr(loaders[0], "dataset", None) if loaders else None
    return min(size, len(dataset)) if isinstance(dataset, Sized) else size
