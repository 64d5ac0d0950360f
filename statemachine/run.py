"""One call of fit/validate/test/predict: the `Run` it works on, and the driver that runs the machine for it.

The Trainer builds a Run for each call and hands it to the machine. Guards, transition callbacks and stage handlers
take the Run and read or change only it: the model and data of the call, what it returns, and the trainer's parts
the call uses (hook runner, metrics, optimization, signals, profiler, machine), reached as the Run's attributes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statemachine.engine.enums import RunningStage, TrainerFn
from statemachine.engine.machine import Flow, Position

if TYPE_CHECKING:
    from devices.strategy import Strategy
    from stages.callbacks.callback import Callback
    from stages.contract import FitLoopView, FitValidationView, TrainerView
    from stages.datamodule import LightningDataModule
    from stages.hooks import HookRunner
    from stages.loggers.logger import Logger
    from stages.metrics import MetricsCollector
    from stages.module import LightningModule
    from stages.optimization import Optimization
    from statemachine.signals import SignalConnector

# Debug switch: every transition checks that all ranks took the same edge (one small collective per transition).
CHECK_RANKS_VARIABLE = "STATEMACHINE_CHECK_RANKS"


class RankDivergenceError(RuntimeError):
    """Ranks took different transitions: the run would otherwise hang in mismatched collectives."""


@dataclass(eq=False)
class Run:
    """What one call of fit/validate/test/predict works on; dropped when the call returns."""

    trainer: TrainerView
    fn: TrainerFn
    model: LightningModule
    datamodule: LightningDataModule | None
    loaders: dict[str, Any]
    ckpt_path_arg: str | None
    flow: Flow
    hooks: HookRunner
    metrics: MetricsCollector
    optimization: Optimization
    signals: SignalConnector
    # The profiler that times the loops' steps; None when profiling is off, so the loops time nothing.
    profiler: Any
    # Makes the call's model and datamodule the trainer's (the Trainer's own step: it owns what outlives a call).
    attach: Callable[[LightningModule, LightningDataModule | None], None]
    model_passed: bool = True
    verbose: bool = True
    return_predictions: bool = True
    weights_only: bool = False
    ckpt_path: str | None = None
    checkpoint: dict[str, Any] | None = None
    exception: BaseException | None = None
    # The stage that was running when the exception came: users read it in on_exception and teardown, as in
    # Lightning; once the interrupt edge is done the machine's own stage (None) shows again.
    failed_stage: RunningStage | None = None
    rng_state: dict[str, Any] = field(default_factory=dict)
    results: list[dict[str, float]] = field(default_factory=list)
    predictions: Any = None
    prediction_record: Any = None  # what prediction writers read during predict
    check_ranks: bool = field(default_factory=lambda: os.environ.get(CHECK_RANKS_VARIABLE, "") not in ("", "0"))
    # The trainer's fit loop, read once: guards read it after every batch.
    fit_loop: FitLoopView = field(init=False)

    def __post_init__(self) -> None:
        self.fit_loop = self.trainer.fit_loop

    # ---- the trainer's parts a run reads ------------------------------------------------------------------

    @property
    def fit_validation(self) -> FitValidationView:
        return self.trainer.fit_validation

    @property
    def strategy(self) -> Strategy:
        return self.trainer.strategy

    @property
    def callbacks(self) -> list[Callback]:
        return self.trainer.callbacks

    @property
    def loggers(self) -> list[Logger]:
        return self.trainer.loggers

    def connect(self) -> None:
        """The call's model and data become the trainer's, so hooks and dataloader resolution see them."""
        self.attach(self.model, self.datamodule)
        self.strategy.connect(self.model)
        self.hooks.reset()

    # ---- what the machine needs of the run ----------------------------------------------------------------

    @property
    def multi_process(self) -> bool:
        return self.trainer.world_size > 1

    def position(self) -> Position:
        trainer = self.trainer
        return Position(trainer.current_epoch, trainer.global_step, self.fit_loop.batch_in_flight, trainer.global_rank)

    def agree(self, value: bool, all_ranks: bool) -> bool:
        return self.trainer.strategy.reduce_boolean_decision(value, all=all_ranks)

    def edge_taken(self, key: str) -> None:
        """With the rank check on: raise RankDivergenceError naming each rank's edge when the ranks did not all
        take `key`."""
        if not self.check_ranks:
            return
        found = self.trainer.strategy.check_same(key)
        if found is not None:
            lines = "\n".join(f"  rank {rank}: {taken}" for rank, taken in enumerate(found))
            raise RankDivergenceError(f"ranks took different transitions ({CHECK_RANKS_VARIABLE}=1):\n{lines}")

    # ---- the driver ---------------------------------------------------------------------------------------

    def drive(self, trigger: str) -> None:
        """Fire the entry event, then run each state's handler and fire the event it reports; the table's guards
        choose where each event leads. On any exception: the `interrupt` edge, then the exception, unchanged."""
        flow = self.flow
        self.signals.guard_sigint()
        try:
            flow.fire(trigger)
            while not flow.spec.resting:
                event = flow.run_handler()
                if event is not None:  # None: the handler's poll already fired
                    flow.fire(event)
        except BaseException as exception:
            if not flow.spec.resting:
                self._interrupt(exception)
            exit_request, flow.exit_request = flow.exit_request, None
            if exit_request is not None:
                raise exit_request from exception  # a hook asked to exit while the run shut down
            raise
        finally:
            self.signals.release_sigint()

    def _interrupt(self, exception: BaseException) -> None:
        """The interrupt edge; should even that fail, the machine still rests in `interrupted`."""
        flow = self.flow
        self.exception = exception
        self.failed_stage = flow.spec.stage
        try:
            flow.fire("interrupt", cause=exception)
        finally:
            if not flow.spec.resting:
                flow.abandon(exception)
