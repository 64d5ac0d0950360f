"""Transition callbacks: the setup, restore, teardown and interrupt logic, one small named function each.

Each takes the trainer. Their names are what the table, the diagram and the history show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from stages import rng
from statemachine import checkpoint

if TYPE_CHECKING:
    from statemachine.trainer import Trainer


# ---- entry: fit / validate / test / predict -------------------------------------------------------------


def connect_model(trainer: Trainer) -> None:
    """Attach the model and data of this run, so hooks and dataloader resolution can see them."""
    run = trainer._run
    trainer._connect(run.model, run.datamodule)


def configure_callbacks(trainer: Trainer) -> None:
    """Merge `LightningModule.configure_callbacks()` into the list (same type replaced), checkpoints last."""
    trainer._merge_model_callbacks()


def prepare_data(trainer: Trainer) -> None:
    hooks = trainer._hooks
    if trainer.strategy.local_rank == 0:
        hooks.datamodule("prepare_data")
        hooks.module("prepare_data")
    trainer.strategy.barrier("prepare_data")


def call_setup_hooks(trainer: Trainer) -> None:
    fn = trainer._run.fn
    for logger in trainer.loggers:
        _ = logger.experiment  # created before setup, so setup hooks can already log to it (reference 2.2 step 4)
    trainer.strategy.barrier("pre_setup")
    trainer._hooks.datamodule("setup", stage=fn)
    trainer._hooks.callbacks("setup", stage=fn)
    trainer._hooks.module("setup", stage=fn)
    trainer.strategy.barrier("post_setup")


def configure_model(trainer: Trainer) -> None:
    trainer._hooks.module("configure_model")  # a no-op unless the module overrides it


def restore_weights_and_callbacks(trainer: Trainer) -> None:
    """Restore 1 (reference 2.2 step 6): load the resolved checkpoint, then weights, datamodule, callbacks."""
    run = trainer._run
    run.ckpt_path = checkpoint.resolve_ckpt_path(trainer, run.ckpt_path_arg)
    if run.ckpt_path is None:
        return
    run.checkpoint = trainer.strategy.load_checkpoint(run.ckpt_path)
    checkpoint.restore_model_and_callbacks(trainer, run.checkpoint, run.ckpt_path)


def setup_strategy(trainer: Trainer) -> None:
    trainer._metrics.reset_all()
    trainer.strategy.setup_module(trainer.lightning_module)


def configure_optimizers(trainer: Trainer) -> None:
    trainer._setup_optimizers()


def call_on_fit_start(trainer: Trainer) -> None:
    trainer._hooks.callbacks("on_fit_start")
    trainer._hooks.module("on_fit_start")


def log_hyperparams(trainer: Trainer) -> None:
    if not trainer.enable_autolog_hparams:
        return
    params = trainer._collect_hparams()
    if not params:
        return
    for logger in trainer.loggers:
        logger.log_hyperparams(params)
        logger.save()


def restore_training_state(trainer: Trainer) -> None:
    """Restore 2 (reference 2.2 step 9): loop counters, optimizers and schedulers; then free the file."""
    run = trainer._run
    if run.checkpoint is not None:
        checkpoint.restore_training_state(trainer, run.checkpoint, run.ckpt_path)


def release_checkpoint(trainer: Trainer) -> None:
    """Everything was restored from the loaded file; do not hold its tensors for the whole run."""
    trainer._run.checkpoint = None


def register_signal_handlers(trainer: Trainer) -> None:
    trainer._signals.register()


# ---- sanity check ---------------------------------------------------------------------------------------


def save_rng_state(trainer: Trainer) -> None:
    """The sanity check must not change the random draws of training (reference 2.2 step 10)."""
    trainer._run.rng_state = rng.capture()


def restore_rng_state(trainer: Trainer) -> None:
    rng.restore(trainer._run.rng_state)


def reset_sanity_results(trainer: Trainer) -> None:
    """What the sanity check logged and counted must not leak into training."""
    trainer._metrics.reset_all()
    trainer.validate_progress.reset()
    trainer.fit_loop.val_progress.reset()


# ---- normal end -----------------------------------------------------------------------------------------


def end_training(trainer: Trainer) -> None:
    """`on_train_end`, only when training actually started (reference 3.1 step 2)."""
    if trainer.fit_loop.train_started:
        trainer.fit_loop.train_started = False
        trainer._hooks.callbacks("on_train_end")
        trainer._hooks.module("on_train_end")


def teardown_internals(trainer: Trainer) -> None:
    """Internal teardown (reference 2.2 step 11): not a user hook, so it runs on success and on failure."""
    trainer.fit_loop.teardown()
    trainer.fit_validation.teardown()
    module = trainer._run.model
    if module is not None:
        trainer.strategy.teardown(module, trainer.optimizers)
    trainer._signals.restore()


def call_on_fit_end(trainer: Trainer) -> None:
    trainer._hooks.callbacks("on_fit_end")
    trainer._hooks.module("on_fit_end")


def call_teardown_hooks(trainer: Trainer) -> None:
    fn = trainer._run.fn
    trainer._hooks.datamodule("teardown", stage=fn)
    trainer._hooks.callbacks("teardown", stage=fn)
    trainer._hooks.module("teardown", stage=fn)


def finalize_loggers_success(trainer: Trainer) -> None:
    for logger in trainer.loggers:
        logger.finalize("success")


# ---- interrupt ------------------------------------------------------------------------------------------


def ignore_sigint(trainer: Trainer) -> None:
    """Shutting down after a failure: further Ctrl-C presses are ignored until teardown restores the handler."""
    trainer._signals.ignore_sigint()


def notify_peers(trainer: Trainer) -> None:
    """First, before any hook: the other ranks learn of this failure, so they stop now instead of waiting in a
    collective until the process group's timeout; collectives are local from here on."""
    trainer.strategy.on_failure(trainer._run.exception)


def call_on_exception_hooks(trainer: Trainer) -> None:
    exception = trainer._run.exception
    trainer._hooks.callbacks("on_exception", exception)
    trainer._hooks.datamodule("on_exception", exception)


def strategy_on_exception(trainer: Trainer) -> None:
    trainer.strategy.on_exception(trainer._run.exception)


def finalize_loggers_failed(trainer: Trainer) -> None:
    for logger in trainer.loggers:
        logger.finalize("failed")


def dump_history(trainer: Trainer) -> None:
    """Post-mortem: every interrupt leaves the run's path on disk, next to its logs."""
    trainer._dump_interrupt_history()


ACTIONS: dict[str, Callable[[Trainer], None]] = {
    fn.__name__: fn
    for fn in (
        connect_model,
        configure_callbacks,
        prepare_data,
        call_setup_hooks,
        configure_model,
        restore_weights_and_callbacks,
        setup_strategy,
        configure_optimizers,
        call_on_fit_start,
        log_hyperparams,
        restore_training_state,
        release_checkpoint,
        register_signal_handlers,
        save_rng_state,
        restore_rng_state,
        reset_sanity_results,
        end_training,
        teardown_internals,
        call_on_fit_end,
        call_teardown_hooks,
        finalize_loggers_success,
        ignore_sigint,
        notify_peers,
        call_on_exception_hooks,
        strategy_on_exception,
        finalize_loggers_failed,
        dump_history,
    )
}
