"""Transition callbacks: the setup, restore, teardown and interrupt logic, one small named function each.

Each takes the trainer. Their names are what the table, the diagram and the history show. A callback may
return a short note (a string), which its history record keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages import rng
from stages.contract import module_of
from stages.resume import ResumePoint
from stages.training import SIGTERMException
from statemachine import checkpoint
from statemachine.machine import note_on_cause
from statemachine.profilers.simple import SimpleProfiler
from statemachine.table import ENTRY_TRIGGERS

if TYPE_CHECKING:
    from statemachine.trainer import Trainer


# ---- entry: fit / validate / test / predict -------------------------------------------------------------


def connect_model(trainer: Trainer) -> None:
    """Attach the model and data of this run, so hooks and dataloader resolution can see them."""
    run = trainer._live_run()
    trainer._connect(run.model, run.datamodule)


def configure_callbacks(trainer: Trainer) -> None:
    """Merge `LightningModule.configure_callbacks()` into the list (same type replaced), checkpoints last."""
    trainer._merge_model_callbacks()


def setup_profiler(trainer: Trainer) -> None:
    """The profiler learns the run's entry point and its report directory (the log directory by default)."""
    profiler = trainer.profiler
    profiler._lightning_module = trainer.lightning_module
    local_rank = trainer.local_rank if trainer.world_size > 1 else None
    profiler.setup(stage=trainer._live_run().fn.value, local_rank=local_rank, log_dir=trainer.log_dir)


def prepare_data(trainer: Trainer) -> None:
    hooks = trainer._hooks
    if trainer.strategy.local_rank == 0:
        hooks.datamodule("prepare_data")
        hooks.module("prepare_data")
    trainer.strategy.barrier("prepare_data")


def call_setup_hooks(trainer: Trainer) -> None:
    fn = trainer._live_run().fn
    for logger in trainer.loggers:
        _ = logger.experiment  # created before setup, so setup hooks can already log to it
    trainer.strategy.barrier("pre_setup")
    trainer._hooks.datamodule("setup", stage=fn)
    trainer._hooks.callbacks("setup", stage=fn)
    trainer._hooks.module("setup", stage=fn)
    trainer.strategy.barrier("post_setup")


def configure_model(trainer: Trainer) -> None:
    trainer._hooks.module("configure_model")  # a no-op unless the module overrides it


def restore_weights_and_callbacks(trainer: Trainer) -> None:
    """Restore the weights first (before the strategy set-up): load the resolved checkpoint, then weights,
    datamodule, callbacks."""
    run = trainer._live_run()
    run.ckpt_path = checkpoint.resolve_ckpt_path(trainer, run.ckpt_path_arg)
    if run.ckpt_path is None:
        return
    run.checkpoint = trainer.strategy.load_checkpoint(run.ckpt_path, weights_only=run.weights_only)
    checkpoint.restore_model_and_callbacks(trainer, run.checkpoint, run.ckpt_path)


def setup_strategy(trainer: Trainer) -> None:
    trainer._metrics.reset_all()
    trainer.strategy.setup_module(module_of(trainer))


def configure_optimizers(trainer: Trainer) -> None:
    trainer._setup_optimizers()


def call_on_fit_start(trainer: Trainer) -> None:
    trainer._hooks.callbacks("on_fit_start")
    trainer._hooks.module("on_fit_start")


def log_hyperparams(trainer: Trainer) -> None:
    """Every logger gets the hyperparameters (when there are any), then the model's graph, then a save."""
    if not trainer.enable_autolog_hparams or not trainer.loggers:
        return
    params = trainer._collect_hparams()
    for logger in trainer.loggers:
        if params:
            logger.log_hyperparams(params)
        logger.log_graph(trainer.lightning_module)
        logger.save()


def restore_training_state(trainer: Trainer) -> str:
    """Restore loop counters, optimizers and schedulers; the note names the resume point for the history."""
    run = trainer._live_run()
    if run.checkpoint is None:
        trainer.fit_loop.resume_point = ResumePoint.FRESH
    else:
        checkpoint.restore_training_state(trainer, run.checkpoint, run.ckpt_path or "the checkpoint")
    loop = trainer.fit_loop
    return f"resume point: {loop.resume_point} (epoch {trainer.current_epoch}, global step {trainer.global_step})"


def release_checkpoint(trainer: Trainer) -> None:
    """Everything was restored from the loaded file; do not hold its tensors for the whole run."""
    trainer._live_run().checkpoint = None


def register_signal_handlers(trainer: Trainer) -> None:
    trainer._signals.register()


# ---- sanity check ---------------------------------------------------------------------------------------


def save_rng_state(trainer: Trainer) -> None:
    """The sanity check must not change the random draws of training."""
    trainer._live_run().rng_state = rng.capture()


def restore_rng_state(trainer: Trainer) -> None:
    rng.restore(trainer._live_run().rng_state)


def reset_sanity_results(trainer: Trainer) -> None:
    """What the sanity check logged and counted must not leak into training."""
    trainer._metrics.reset_all()
    trainer.validate_progress.reset()
    trainer.fit_loop.val_progress.reset()


# ---- normal end -----------------------------------------------------------------------------------------


def start_training(trainer: Trainer) -> None:
    """`on_train_start`, once the training data is ready and fit is not already done."""
    trainer.fit_loop.start_training()


def end_training(trainer: Trainer) -> None:
    """`on_train_end`: only on the edge that leaves a training that started."""
    trainer._hooks.callbacks("on_train_end")
    trainer._hooks.module("on_train_end")


def teardown_internals(trainer: Trainer) -> None:
    """Internal teardown: not a user hook, so it runs on success and on failure."""
    trainer.fit_loop.teardown()
    trainer.fit_validation.teardown()
    module = trainer._live_run().model
    if module is not None:
        trainer.strategy.teardown(module, trainer.optimizers)
    trainer._signals.restore()


def call_on_fit_end(trainer: Trainer) -> None:
    trainer._hooks.callbacks("on_fit_end")
    trainer._hooks.module("on_fit_end")


def call_teardown_hooks(trainer: Trainer) -> None:
    fn = trainer._live_run().fn
    trainer._hooks.datamodule("teardown", stage=fn)
    trainer._hooks.callbacks("teardown", stage=fn)
    trainer._hooks.module("teardown", stage=fn)


def finalize_loggers_success(trainer: Trainer) -> None:
    for logger in trainer.loggers:
        logger.finalize("success")


def describe_profiler(trainer: Trainer) -> None:
    """The profiler's report of the run: printed, or written to `{stage}-{filename}.txt` when it has a filename."""
    profiler = trainer.profiler
    if isinstance(profiler, SimpleProfiler):
        profiler.add_machine_timings(trainer._flow.history.since_last(ENTRY_TRIGGERS))
    profiler.describe()


# ---- interrupt ------------------------------------------------------------------------------------------


def ignore_sigint(trainer: Trainer) -> None:
    """Shutting down after a failure: further Ctrl-C presses are ignored until teardown restores the handler."""
    trainer._signals.ignore_sigint()


def notify_peers(trainer: Trainer) -> None:
    """First, before any hook: the other ranks learn of this failure, so they stop now instead of waiting in a
    collective until the process group's timeout; collectives are local from here on. A SIGTERM that every rank
    agreed on is no failure: all ranks take this edge together and their hooks may still use collectives."""
    exception = trainer._live_run().exception
    agreed_stop = isinstance(exception, SIGTERMException) and exception.agreed
    if exception is not None and not agreed_stop:
        trainer.strategy.on_failure(exception)


def call_on_exception_hooks(trainer: Trainer) -> None:
    """Every callback's `on_exception`, then the DataModule's, each even when an earlier one raised: a failing
    hook is logged and noted on the original error, never replaces it. A hook that raised KeyboardInterrupt or
    SystemExit is raised again once all have run: this best-effort step notes it, the interrupt edge finishes,
    and the driver raises it."""
    exception = trainer._live_run().exception
    failures: list[tuple[object, BaseException]] = list(trainer._hooks.callbacks_each("on_exception", exception))
    try:
        trainer._hooks.datamodule("on_exception", exception)
    except BaseException as datamodule_error:
        failures.append((trainer.datamodule, datamodule_error))
    exits = [error for _, error in failures if not isinstance(error, Exception)]
    for owner, error in failures:
        if isinstance(error, Exception):
            hook = f"{type(owner).__name__}.on_exception"
            note = f"{hook} also raised {type(error).__name__}: {error}"
            note_on_cause(exception, error, f"{hook} raised; the other hooks still ran", note)
    if exits:
        raise exits[0]


def strategy_on_exception(trainer: Trainer) -> None:
    exception = trainer._live_run().exception
    if exception is not None:
        trainer.strategy.on_exception(exception)


def finalize_loggers_failed(trainer: Trainer) -> None:
    for logger in trainer.loggers:
        logger.finalize("failed")


def teardown_profiler(trainer: Trainer) -> None:
    """A failed run gets no profiler report, but the profiler stops and lets go of what it recorded."""
    trainer.profiler.teardown(trainer._live_run().fn.value)


def dump_history(trainer: Trainer) -> None:
    """Post-mortem: every interrupt leaves the run's path on disk, next to its logs. Written once the interrupt
    edge is complete, so the dump ends in `interrupted`; a dump that fails (a full disk) is logged and noted on
    the original error, never replaces it."""
    exception = trainer._live_run().exception

    def write() -> None:
        try:
            trainer._dump_interrupt_history()
        except Exception as error:
            note = f"the state history could not be dumped: {type(error).__name__}: {error}"
            note_on_cause(exception, error, "the state history could not be dumped", note)

    trainer._flow.defer(write)
