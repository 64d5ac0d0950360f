"""Checkpoint logic: what goes into a Lightning-format file, where `ckpt_path` points, and how a run restores.

File I/O (atomic writes, fsspec, clear errors on corrupt files) lives in `devices.checkpoint_io`.
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from devices.checkpoint_io import CorruptCheckpointError
from stages import hparams, resume
from stages.callbacks.model_checkpoint import ModelCheckpoint
from stages.contract import TrainerView, module_of
from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.loop_rules import max_epochs_reached, max_steps_reached
from stages.rank_zero import rank_zero_info
from stages.resume import ResumePoint
from statemachine import requeue
from statemachine.engine.enums import TrainerFn

if TYPE_CHECKING:
    from stages.hooks import HookRunner
    from stages.optimization import Optimization
    from statemachine.run import Run

LIGHTNING_VERSION = "2.6.5"
RESUME_KEY = "statemachine_resume"  # RNG states and loader position for an exact resume, beyond Lightning's keys
_LAST = re.compile(r"last(-v?\d+)?\.ckpt$")


# ---- saving ----------------------------------------------------------------------------------------------------------


def dump(trainer: TrainerView, hooks: HookRunner, optimization: Optimization, weights_only: bool) -> dict[str, Any]:
    """The checkpoint dict, keys in Lightning's write order (the trainer's hooks and optimization: a save may come
    between calls too)."""
    module = module_of(trainer)
    checkpoint: dict[str, Any] = {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        "pytorch-lightning_version": LIGHTNING_VERSION,
        "state_dict": trainer.strategy.module_state_dict(module),
        "loops": {
            "fit_loop": trainer.fit_loop.state_dict(),
            "validate_loop": trainer.validate_loop.state_dict(),
            "test_loop": trainer.test_loop.state_dict(),
            "predict_loop": trainer.predict_loop.state_dict(),
        },
    }
    if not weights_only:
        checkpoint["callbacks"] = _callback_states(trainer)
        optimizer_states, scheduler_states = optimization.state_dicts(module)
        checkpoint["optimizer_states"] = optimizer_states
        checkpoint["lr_schedulers"] = scheduler_states
        precision_state = trainer.strategy.precision.state_dict()
        if precision_state:
            checkpoint[type(trainer.strategy.precision).__qualname__] = precision_state
    _add_hparams(checkpoint, trainer)
    datamodule = trainer.datamodule
    if datamodule is not None:
        state = hooks.datamodule("state_dict")  # through the runner: a profiler times it as the DataModule's hook
        if state:
            checkpoint[type(datamodule).__qualname__] = state
    if not weights_only:
        checkpoint[RESUME_KEY] = _with_every_rank(trainer, trainer.fit_loop.resume_state())
        hooks.callbacks("on_save_checkpoint", checkpoint)
    hooks.module("on_save_checkpoint", checkpoint)
    return checkpoint


def _with_every_rank(trainer: TrainerView, state: dict[str, Any]) -> dict[str, Any]:
    """Every rank draws from its own generators: an exact resume needs each rank's states, indexed by rank.
    The top-level states stay this rank's, so a one-process run can resume from the file too."""
    if trainer.world_size == 1:
        return state
    every = trainer.strategy.all_gather_object(state)
    return {**state, "per_rank": every} if len(every) == trainer.world_size else state


def _for_this_rank(trainer: TrainerView, state: dict[str, Any] | None) -> dict[str, Any] | None:
    if state is None or "per_rank" not in state:
        return state
    every = state["per_rank"]
    # Saved with another number of ranks: the draws cannot match anyway; rank 0's states are the best start.
    return every[trainer.global_rank] if len(every) == trainer.world_size else state


def _callback_states(trainer: TrainerView) -> dict[str, Any]:
    states = {}
    for callback in trainer.callbacks:
        state = callback.state_dict()
        if state:
            states[callback.state_key] = state
    return states


def _add_hparams(checkpoint: dict[str, Any], trainer: TrainerView) -> None:
    module = module_of(trainer)
    for owner in (module, trainer.datamodule):
        if owner is not None:
            checkpoint.update(hparams.checkpoint_entries(owner))


# ---- ckpt_path resolution ("best", "last", a path) -------------------------------------------------------------------


def resolve_ckpt_path(run: Run, ckpt_path: str | None) -> str | None:
    trainer = run.trainer
    fn = run.fn.value
    if ckpt_path is None:
        ckpt_path = requeue.auto_resume(trainer)
    if ckpt_path is None and run.model_passed:
        return None
    if ckpt_path is None:
        ckpt_path = "best"
        warnings.warn(
            f"`.{fn}(ckpt_path=None)` was called without a model. The best model of the previous `fit` call will be "
            f"used. You can pass `.{fn}(ckpt_path='best')` to use the best model or `.{fn}(ckpt_path='last')` to use "
            "the last model. If you pass a value, this warning will be silenced.",
            TrainerWarning,
            stacklevel=2,
        )
    if ckpt_path == "best":
        return _restoring(_best_path(trainer, fn))
    if ckpt_path == "last":
        last = _last_path(trainer, fn)
        return None if last is None else _restoring(last)
    if ckpt_path == "hpc":
        return _restoring(requeue.resume_path(trainer, fn))
    if ckpt_path.startswith("registry"):
        raise ValueError(f".{fn}(ckpt_path={ckpt_path!r}): the model registry is not supported")
    if not ckpt_path:
        raise ValueError(
            f"`.{fn}()` found no path for the best weights: {ckpt_path!r}. Please specify a path for a checkpoint "
            f"`.{fn}(ckpt_path=PATH)`"
        )
    return _restoring(ckpt_path)


def _restoring(path: str) -> str:
    rank_zero_info(f"Restoring states from the checkpoint path at {path}")
    return path


def _best_path(trainer: TrainerView, fn: str) -> str:
    callbacks = trainer.checkpoint_callbacks
    if not callbacks:
        raise ValueError(f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured.')
    if len(callbacks) > 1:
        warnings.warn(
            f'`.{fn}(ckpt_path="best")` is called with Trainer configured with multiple `ModelCheckpoint` callbacks. '
            "It will use the best checkpoint path from first checkpoint callback.",
            TrainerWarning,
            stacklevel=3,
        )
    best = getattr(callbacks[0], "best_model_path", "")
    if not best:
        if trainer.fast_dev_run:
            raise ValueError(
                f'You cannot execute `.{fn}(ckpt_path="best")` with `fast_dev_run=True`. Please pass an exact '
                f"checkpoint path to `.{fn}(ckpt_path=...)`"
            )
        raise ValueError(
            f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured to save the best model.'
        )
    return best


def _last_path(trainer: TrainerView, fn: str) -> str | None:
    candidates: list[tuple[float, str]] = []
    for callback in trainer.checkpoint_callbacks:
        if not isinstance(callback, ModelCheckpoint) or not callback.dirpath:
            continue
        fs, root = fsspec.core.url_to_fs(callback.dirpath)
        if not fs.isdir(root):
            continue
        for path in fs.ls(root, detail=False):
            if _LAST.search(path):
                # a local file is named by its plain path, as the checkpoint callback names it
                shown = path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)
                candidates.append((fs.modified(path).timestamp(), shown))
    if not candidates:
        warnings.warn(
            f'.{fn}(ckpt_path="last") is set, but there is no last checkpoint available. No checkpoint will be '
            "loaded. HINT: Set `ModelCheckpoint(..., save_last=True)`.",
            TrainerWarning,
            stacklevel=3,
        )
        return None
    return max(candidates)[1]


# ---- restoring -------------------------------------------------------------------------------------------------------


def restore_model_and_callbacks(run: Run, checkpoint: dict[str, Any], path: str) -> None:
    """Restore the weights (before the strategy set-up): module hook, weights, DataModule, callbacks."""
    if "state_dict" not in checkpoint:
        raise CorruptCheckpointError(f"{path}: not a Lightning checkpoint (no 'state_dict' key)")
    trainer = run.trainer
    module = run.model
    run.hooks.module("on_load_checkpoint", checkpoint)
    run.strategy.load_module_state_dict(module, checkpoint["state_dict"], strict=module.strict_loading)
    datamodule = trainer.datamodule
    if datamodule is not None and type(datamodule).__qualname__ in checkpoint:
        run.hooks.datamodule("load_state_dict", checkpoint[type(datamodule).__qualname__])
    run.hooks.callbacks("on_load_checkpoint", checkpoint)
    saved = dict(checkpoint.get("callbacks", {}))
    for callback in trainer.callbacks:
        state = saved.pop(callback.state_key, None)
        if state is not None:
            callback.load_state_dict(state)
    if saved:
        warnings.warn(
            f"{path} holds state for callbacks that are not in this run: {sorted(saved)}", TrainerWarning, stacklevel=2
        )
    if run.fn != TrainerFn.FITTING:  # a fit has restored everything once its training state is back
        rank_zero_info(f"Loaded model weights from the checkpoint at {path}")


def restore_training_state(run: Run, checkpoint: dict[str, Any], path: str) -> None:
    """Restore 2: precision, the fit loop's counters (and its named resume point), RNG states, optimizers and
    schedulers."""
    if "optimizer_states" not in checkpoint:
        raise KeyError(
            f"{path} has no optimizer states (saved with save_weights_only=True?): it can load weights for "
            "validate/test/predict, but fit cannot resume from it"
        )
    trainer = run.trainer
    _restore_fit_loop(trainer, checkpoint["loops"]["fit_loop"])
    trainer.fit_loop.load_resume_state(_for_this_rank(trainer, checkpoint.get(RESUME_KEY)))
    if trainer.max_epochs != -1 and trainer.current_epoch > trainer.max_epochs:
        raise MisconfigurationException(
            f"{path} is at epoch {trainer.current_epoch}, past max_epochs={trainer.max_epochs}; raise max_epochs "
            "to continue training"
        )
    restore_precision_and_optimizers(run, checkpoint)
    rank_zero_info(f"Restored all states from the checkpoint at {path}")


def restore_precision_and_optimizers(run: Run, checkpoint: dict[str, Any]) -> None:
    """The precision plugin's state (a gradient scaler's), the optimizers' and the schedulers'."""
    precision = run.strategy.precision
    precision.load_state_dict(checkpoint.get(type(precision).__qualname__, {}))
    run.optimization.load_state_dicts(run.model, checkpoint["optimizer_states"], checkpoint.get("lr_schedulers", []))


def _restore_fit_loop(trainer: TrainerView, state: dict[str, Any]) -> None:
    """Load the counters, name where the save happened, and settle the counters for that point."""
    loop = trainer.fit_loop
    loop.load_state_dict(state)
    point = resume.classify(loop.epoch_progress, loop.batch_progress, loop.val_progress, trainer.max_steps)
    accumulate = trainer.accumulate_grad_batches
    if resume.step_uncounted(loop.epoch_progress, loop.batch_progress, trainer.max_steps, accumulate):
        loop.batches_that_stepped += 1
    resume.settle(point, loop.epoch_progress, loop.batch_progress)
    if point is ResumePoint.EPOCH_BOUNDARY and (max_steps_reached(trainer) or max_epochs_reached(trainer)):
        point = ResumePoint.FIT_DONE
    loop.resume_point = point
