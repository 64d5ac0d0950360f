"""Transition callbacks: the setup, restore, teardown and interrupt logic, one small named function each.

Each takes the `Run` of the call in flight. Their names are what the table, the diagram and the history show. A
callback may return a short note (a string), which its history record keeps.
"""

from __future__ import annotations

import logging
import os

from stages import data, hparams, rng
from stages.callbacks.callback import Callback, checkpoints_last
from stages.datamodule import LightningDataModule
from stages.hooks import is_overridden, overridden_steps
from stages.loggers.logger import Logger
from stages.rank_zero import rank_zero_debug, rank_zero_info
from stages.resume import ResumePoint
from stages.training import SIGTERMException
from statemachine import checkpoint
from statemachine.engine.diagram import flow_artifacts
from statemachine.engine.machine import note_on_cause
from statemachine.engine.table import ENTRY_TRIGGERS
from statemachine.guards import SHOULD_STOP, TRAINING_OFF, fit_done
from statemachine.profilers.simple import SimpleProfiler
from statemachine.run import Run

_log = logging.getLogger(__name__)


# ---- entry: fit / validate / test / predict -------------------------------------------------------------


def connect_model(run: Run) -> None:
    """Attach the model and data of this run, so hooks and dataloader resolution can see them; hyperparameters
    a checkpoint could not hold are dropped first. The loaders the last call left in `trainer.train_dataloader`,
    `.val_dataloaders`, `.test_dataloaders` and `.predict_dataloaders` are forgotten: they show this call's."""
    hparams.clean_namespace(run.model.hparams)
    trainer = run.trainer
    run.fit_loop.loaded_train = None
    trainer.val_dataloaders = trainer.test_dataloaders = trainer.predict_dataloaders = None
    run.connect()


def configure_callbacks(run: Run) -> None:
    """Merge `LightningModule.configure_callbacks()` into the list (same type replaced), checkpoints last."""
    trainer = run.trainer
    extra = run.hooks.module("configure_callbacks")
    extra = [extra] if isinstance(extra, Callback) else list(extra or [])
    if extra:
        # The module's callbacks replace the trainer's of the same class or of a parent class.
        replaced = {type(c) for c in trainer.callbacks if type(c) is not Callback and _replaced_by(c, extra)}
        trainer.callbacks = [c for c in trainer.callbacks if type(c) not in replaced] + extra
    trainer.callbacks = checkpoints_last(trainer.callbacks)
    run.hooks.reset()


def _replaced_by(callback: Callback, others: list[Callback]) -> bool:
    """Whether some callback in `others` is of `callback`'s class or a subclass of it."""
    return any(isinstance(other, type(callback)) for other in others)


def setup_profiler(run: Run) -> None:
    """The profiler learns the run's entry point and its report directory (the log directory by default)."""
    profiler = run.trainer.profiler
    profiler._lightning_module = run.trainer.lightning_module
    local_rank = run.trainer.local_rank if run.trainer.world_size > 1 else None
    profiler.setup(stage=run.fn.value, local_rank=local_rank, log_dir=run.trainer.log_dir)


def prepare_data(run: Run) -> None:
    """The DataModule's, then the module's `prepare_data`, each only where overridden (a profiler shows only
    those, as Lightning's)."""
    hooks = run.hooks
    if run.strategy.local_rank == 0:
        datamodule = run.trainer.datamodule
        if datamodule is not None and is_overridden("prepare_data", datamodule, LightningDataModule):
            hooks.datamodule("prepare_data")
        if hooks.module_overrides("prepare_data"):
            hooks.module("prepare_data")
    run.strategy.barrier("prepare_data")


def call_setup_hooks(run: Run) -> None:
    fn = run.fn
    for logger in run.loggers:
        _ = logger.experiment  # created before setup, so setup hooks can already log to it
    run.strategy.barrier("pre_setup")
    run.hooks.datamodule("setup", stage=fn)
    run.hooks.callbacks("setup", stage=fn)
    run.hooks.module("setup", stage=fn)
    run.strategy.barrier("post_setup")


def configure_model(run: Run) -> None:
    """Layers made here are born on the run's device, in the precision's dtype (a no-op unless the module
    overrides the hook)."""
    if run.hooks.module_overrides("configure_model"):
        with run.strategy.tensor_init_context():
            run.hooks.module("configure_model")


def restore_weights_and_callbacks(run: Run) -> None:
    """Load the resolved checkpoint, then restore weights, datamodule and callbacks. The strategy has placed the
    module already, so a sharded module loads only its own shards."""
    run.ckpt_path = checkpoint.resolve_ckpt_path(run, run.ckpt_path_arg)
    if run.ckpt_path is None:
        return
    run.checkpoint = run.strategy.load_checkpoint(run.ckpt_path, weights_only=run.weights_only)
    checkpoint.restore_model_and_callbacks(run, run.checkpoint, run.ckpt_path)


def setup_strategy(run: Run) -> None:
    run.metrics.reset_all()
    run.strategy.setup_module(run.model)
    run.strategy.route_steps(run.model, overridden_steps(run.model))


def configure_optimizers(run: Run) -> None:
    run.optimization.setup(run.model)


def call_on_fit_start(run: Run) -> None:
    run.hooks.callbacks("on_fit_start")
    run.hooks.module("on_fit_start")


def log_hyperparams(run: Run) -> None:
    """Every logger gets the hyperparameters (when there are any), then the model's graph, then a save."""
    if not run.trainer.enable_autolog_hparams or not run.loggers:
        return
    params = hparams.hparams_to_log(run.model, run.trainer.datamodule)
    for logger in run.loggers:
        if params is not None:
            logger.log_hyperparams(params)
        logger.log_graph(run.trainer.lightning_module)
        logger.save()


def restore_training_state(run: Run) -> str:
    """Restore loop counters, optimizers and schedulers; the note names the resume point for the history."""
    if run.checkpoint is None:
        run.fit_loop.resume_point = ResumePoint.FRESH
    else:
        checkpoint.restore_training_state(run, run.checkpoint, run.ckpt_path or "the checkpoint")
    trainer, loop = run.trainer, run.fit_loop
    return f"resume point: {loop.resume_point} (epoch {trainer.current_epoch}, global step {trainer.global_step})"


def release_checkpoint(run: Run) -> None:
    """Everything was restored from the loaded file; do not hold its tensors for the whole run."""
    run.checkpoint = None


def register_signal_handlers(run: Run) -> None:
    run.signals.register()


# ---- sanity check ---------------------------------------------------------------------------------------


def save_rng_state(run: Run) -> None:
    """The sanity check must not change the random draws of training."""
    run.rng_state = rng.capture()


def restore_rng_state(run: Run) -> None:
    rng.restore(run.rng_state)


def reset_sanity_results(run: Run) -> None:
    """What the sanity check logged and counted must not leak into training."""
    run.metrics.reset_all()
    run.trainer.validate_progress.reset()
    run.fit_loop.val_progress.reset()


# ---- normal end -----------------------------------------------------------------------------------------


def start_training(run: Run) -> None:
    """`on_train_start`, once the training data is ready and fit is not already done."""
    run.fit_loop.start_training()


def say_why_fit_stopped(run: Run) -> None:
    """Lightning's one line on why fit ends; a stop the user asked for (`should_stop`, or no training at all with
    `limit_train_batches=0`) is only a debug line. A rank whose own limits do not hold stops because another
    rank's did, and says nothing."""
    reason = fit_done(run)
    if reason is None:
        return
    say = rank_zero_debug if reason.startswith(SHOULD_STOP) or reason == TRAINING_OFF else rank_zero_info
    say(f"`Trainer.fit` stopped: {reason}.")


def end_training(run: Run) -> None:
    """`on_train_end`: only on the edge that leaves a training that started."""
    run.hooks.callbacks("on_train_end")
    run.hooks.module("on_train_end")


def teardown_internals(run: Run) -> None:
    """Internal teardown: not a user hook, so it runs on success and on failure. The loaders' persistent workers
    stop with the call, as in Lightning."""
    trainer = run.trainer
    for loaders in (
        run.fit_loop.train_loader,
        run.fit_validation.loaders,
        trainer.val_dataloaders,
        trainer.test_dataloaders,
        trainer.predict_dataloaders,
    ):
        data.shut_down_workers(loaders)
    run.fit_loop.teardown()
    run.fit_validation.teardown()
    module = run.model
    if module is not None:
        run.strategy.teardown(module, run.trainer.optimizers)
    run.signals.restore()


def call_on_fit_end(run: Run) -> None:
    run.hooks.callbacks("on_fit_end")
    run.hooks.module("on_fit_end")


def call_teardown_hooks(run: Run) -> None:
    fn = run.fn
    run.hooks.datamodule("teardown", stage=fn)
    run.hooks.callbacks("teardown", stage=fn)
    run.hooks.module("teardown", stage=fn)


def send_flow_to_trackers(run: Run) -> None:
    """The loggers that keep artifacts (the trackers) receive the run's state history and the diagram of its
    path before they close, so a run on a shared server shows where it stopped."""
    trackers = [logger for logger in run.loggers if type(logger).log_flow_artifacts is not Logger.log_flow_artifacts]
    if trackers and run.trainer.global_rank == 0:
        files = flow_artifacts(run.flow.history.to_dump(run.flow.table), run.flow.table)
        for tracker in trackers:
            tracker.log_flow_artifacts(files)


def finalize_loggers_success(run: Run) -> None:
    for logger in run.loggers:
        logger.finalize("success")


def describe_profiler(run: Run) -> None:
    """The profiler's report of the run: printed, or written to `{stage}-{filename}.txt` when it has a filename."""
    profiler = run.trainer.profiler
    if isinstance(profiler, SimpleProfiler):
        profiler.add_machine_timings(run.flow.history.since_last(ENTRY_TRIGGERS))
    profiler.describe()


# ---- interrupt ------------------------------------------------------------------------------------------


def ignore_sigint(run: Run) -> None:
    """Shutting down after a failure: further Ctrl-C presses are ignored until teardown restores the handler."""
    if isinstance(run.exception, KeyboardInterrupt) and run.trainer.is_global_zero:
        _log.warning("\nDetected KeyboardInterrupt, attempting graceful shutdown ...")
    run.signals.ignore_sigint()


def notify_peers(run: Run) -> str | None:
    """First, before any hook: the other ranks learn of this failure, so they stop now instead of waiting in a
    collective until the process group's timeout; collectives are local from here on. A SIGTERM that every rank
    agreed on is no failure: all ranks take this edge together and their hooks may still use collectives. When the
    failure is a collective's timeout, the note names the ranks that never arrived."""
    exception = run.exception
    agreed_stop = isinstance(exception, SIGTERMException) and exception.agreed
    if exception is None or agreed_stop:
        return None
    run.strategy.on_failure(exception)
    stall = getattr(run.strategy, "stall", None)
    return None if stall is None or stall is exception else str(stall)


def call_on_exception_hooks(run: Run) -> None:
    """Every callback's `on_exception`, then the DataModule's, each even when an earlier one raised: a failing
    hook is logged and noted on the original error, never replaces it. A hook that raised KeyboardInterrupt or
    SystemExit is raised again once all have run: this best-effort step notes it, the interrupt edge finishes,
    and the driver raises it."""
    exception = run.exception
    failures: list[tuple[object, BaseException]] = list(run.hooks.callbacks_each("on_exception", exception))
    try:
        run.hooks.datamodule("on_exception", exception)
    except BaseException as datamodule_error:
        failures.append((run.trainer.datamodule, datamodule_error))
    exits = [error for _, error in failures if not isinstance(error, Exception)]
    for owner, error in failures:
        if isinstance(error, Exception):
            hook = f"{type(owner).__name__}.on_exception"
            note = f"{hook} also raised {type(error).__name__}: {error}"
            note_on_cause(exception, error, f"{hook} raised; the other hooks still ran", note)
    if exits:
        raise exits[0]


def strategy_on_exception(run: Run) -> None:
    exception = run.exception
    if exception is not None:
        run.strategy.on_exception(exception)


def finalize_loggers_failed(run: Run) -> None:
    for logger in run.loggers:
        logger.finalize("failed")


def teardown_profiler(run: Run) -> None:
    """A failed run gets no profiler report, but the profiler stops and lets go of what it recorded."""
    run.trainer.profiler.teardown(run.fn.value)


def dump_history(run: Run) -> None:
    """Post-mortem: every interrupt leaves the run's path on disk, next to its logs. Written once the interrupt
    edge is complete, so the dump ends in `interrupted`; a dump that fails (a full disk) is logged and noted on
    the original error, never replaces it."""
    exception = run.exception

    def write() -> None:
        try:
            _dump_interrupt_history(run)
        except Exception as error:
            note = f"the state history could not be dumped: {type(error).__name__}: {error}"
            note_on_cause(exception, error, "the state history could not be dumped", note)

    run.flow.defer(write)


def history_dump_path(run: Run) -> str:
    """Where a failed run's history goes: next to its logs, named by rank and the last record's number."""
    trainer = run.trainer
    record = run.flow.history.records[-1]
    directory = trainer.log_dir or trainer.default_root_dir
    # One file per rank in a multi-process run, so ranks never overwrite each other's dump.
    rank = f"rank{trainer.global_rank}-" if trainer.world_size > 1 else ""
    return os.path.join(directory, f"state-history-{rank}{record.seq}.json")


def _dump_interrupt_history(run: Run) -> None:
    trainer = run.trainer
    trainer.history_dump_path = trainer.dump_history(history_dump_path(run))
    _log.warning("the run was interrupted; its state history is in %s", trainer.history_dump_path)
