"""Running an entry point on every rank: through the strategy's launcher when it has one, with rank-zero state
set, peers' failures watched, and, under spawn/fork launchers, rank 0's results handed back to this process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fsspec
import torch

from devices.launchers import MultiprocessingLauncher
from devices.parallel import ParallelStrategy
from devices.watchdog import PeerFailedError
from stages.contract import TrainerView
from stages.exceptions import MisconfigurationException
from stages.loggers.logger import FileLogger
from stages.rank_zero import rank_zero_only
from statemachine import actions

if TYPE_CHECKING:
    from statemachine.run import Run


@dataclass
class WorkerOutput:
    """What rank 0 of a spawned run sends back so that the main process holds the trained state."""

    state: str
    weights: dict[str, torch.Tensor]
    callback_metrics: dict[str, torch.Tensor]
    logged_metrics: dict[str, torch.Tensor]
    checkpoint: dict[str, Any] = field(default_factory=dict)
    results: list[dict[str, float]] = field(default_factory=list)
    predictions: Any = None
    history: Any = None  # rank 0's History: this process's records before the launch, then the run's


def spawns(trainer: TrainerView) -> bool:
    """Whether the entry point runs in processes other than this one (the spawn and fork launchers)."""
    return isinstance(getattr(trainer.strategy, "launcher", None), MultiprocessingLauncher)


def default_return_predictions(trainer: TrainerView, given: bool | None) -> bool:
    """Predictions stay in spawned processes, so there they are not returned unless asked for (then refused)."""
    if given and spawns(trainer):
        raise MisconfigurationException(
            "return_predictions=True cannot be used with a spawn or fork launcher: predictions stay in the worker "
            "processes; use strategy='ddp' or write them out from a callback"
        )
    return (not spawns(trainer)) if given is None else given


def run(run: Run, trigger: str) -> None:
    """Drive `trigger` on every rank of the trainer's strategy."""
    strategy = run.strategy
    launcher = getattr(strategy, "launcher", None)
    if launcher is None:
        if isinstance(strategy, ParallelStrategy):
            strategy.setup_environment()  # torchrun or SLURM started this process: join their group
        _drive(run, trigger)
        return
    if isinstance(launcher, MultiprocessingLauncher):
        output = launcher.launch(_drive_in_worker, run, trigger)
        _apply(run, output)
        return
    launcher.launch(_drive, run, trigger)


def _drive(run: Run, trigger: str) -> None:
    strategy = run.strategy
    rank_zero_only.rank = strategy.global_rank
    if not isinstance(strategy, ParallelStrategy):
        run.drive(trigger)
        return
    _agree_on_log_versions(run.trainer, strategy)
    strategy.arm(lambda: run.exception is not None, lambda: _position(run), lambda stack: _dump_stalled(run, stack))
    try:
        run.drive(trigger)
    except BaseException as error:
        failure = strategy.peer_failure()
        if failure is not None and not isinstance(error, PeerFailedError):
            # This rank only stopped because another failed first: say which, and what went wrong there.
            raise PeerFailedError.of(failure) from error
        if strategy.stall is not None and error is not strategy.stall:
            # A collective inside autograd or FSDP timed out: name the ranks it waited for.
            raise strategy.stall from error
        raise
    finally:
        strategy.disarm()


def _position(run: Run) -> str:
    """Where this rank's run is, as the peers see it if they time out waiting for it (read from another thread)."""
    trainer = run.trainer
    return (
        f"{run.flow.machine_state} (epoch {trainer.current_epoch}, global step {trainer.global_step}, "
        f"batch {run.fit_loop.batch_idx})"
    )


def _dump_stalled(run: Run, stack: str) -> None:
    """The peers timed out waiting for this rank: its history, and its threads' stacks beside it."""
    path = actions.history_dump_path(run)
    written = run.trainer.dump_history(path)
    with fsspec.open(written.removesuffix(".json") + ".stack.txt", "w") as file:
        file.write(stack)


def _agree_on_log_versions(trainer: TrainerView, strategy: ParallelStrategy) -> None:
    """A logger picks its next free version folder on first use; every rank takes rank 0's pick, so the
    checkpoint and history paths match across ranks."""
    for logger in trainer.loggers:
        if isinstance(logger, FileLogger) and logger._dir._version is None:
            logger._dir._version = strategy.broadcast(logger.version)


def _drive_in_worker(run: Run, trigger: str) -> WorkerOutput | None:
    _own_memory(run.model)
    _drive(run, trigger)
    trainer = run.trainer
    weights = run.strategy.gathered_module_state_dict(run.model)  # every rank: a sharded model gathers its shards
    if not trainer.is_global_zero:
        return None
    callback = trainer.checkpoint_callback
    saved = {}
    if callback is not None:
        saved = {name: getattr(callback, name, None) for name in _CHECKPOINT_RESULTS}
    return WorkerOutput(
        state=run.flow.machine_state,
        weights={k: v.detach().cpu() for k, v in weights.items()},
        callback_metrics={k: v.detach().cpu() for k, v in trainer.callback_metrics.items()},
        logged_metrics={k: v.detach().cpu() for k, v in trainer.logged_metrics.items()},
        checkpoint=saved,
        results=run.results,
        predictions=run.predictions,
        history=run.flow.history,
    )


def _own_memory(module: torch.nn.Module) -> None:
    """torch.multiprocessing hands tensors to new processes in shared memory: every rank would update the same
    weights. Each rank trains its own copy."""
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.is_shared():
            tensor.data = tensor.data.clone()


_CHECKPOINT_RESULTS = ("best_model_path", "best_model_score", "last_model_path", "best_k_models", "kth_best_model_path")


def _apply(run: Run, output: WorkerOutput) -> None:
    """The main process takes over rank 0's trained weights, metrics, checkpoint paths and results."""
    # The workers connected their copies of the model; this process's model gets their weights.
    run.connect()
    run.model.load_state_dict(output.weights)
    run.metrics.adopt(output.callback_metrics, output.logged_metrics)
    callback = run.trainer.checkpoint_callback
    if callback is not None:
        for name, value in output.checkpoint.items():
            setattr(callback, name, value)
    run.results = output.results
    run.predictions = output.predictions
    run.flow.machine_state = output.state
    run.flow.history = output.history
