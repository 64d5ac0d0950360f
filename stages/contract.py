"""The contract between the planes: what the stages may use of the Trainer, as typed Protocols.

The Trainer (in `statemachine`) implements `TrainerView`; the loops, hooks, logging and optimization in `stages`
take a `TrainerView` and use nothing else of it, so mypy catches a misspelled or missing member, and the
Trainer's other internals can change freely. The underscored members are the planes' shared internals (the hook
runner, the logged metrics, the optimizers, the run in flight, the machine); users' code never needs them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from datetime import timedelta

    import torch

    from devices.strategy import Strategy
    from stages.callbacks.callback import Callback, Checkpoint
    from stages.datamodule import LightningDataModule
    from stages.evaluation import FitValidation
    from stages.hooks import HookRunner
    from stages.loggers.logger import Logger
    from stages.metrics import MetricsCollector
    from stages.module import LightningModule
    from stages.optimization import LRSchedulerConfig, Optimization
    from stages.progress import BatchProgress
    from stages.training import FitLoop


class StageView(Protocol):
    """The running stage, as the machine's state names it (`statemachine.engine.enums.RunningStage`)."""

    @property
    def dataloader_prefix(self) -> str: ...


class StateView(Protocol):
    @property
    def stage(self) -> StageView | None: ...


class StateSpecView(Protocol):
    @property
    def stage(self) -> StageView | None: ...


class TableView(Protocol):
    @property
    def by_name(self) -> Mapping[str, StateSpecView]: ...


class FlowView(Protocol):
    """The machine, as the loops use it: poll the table's candidates for an event, read the current state."""

    machine_state: str

    @property
    def table(self) -> TableView: ...

    def poller(self, trigger: str) -> Callable[[], bool]: ...


class RunView(Protocol):
    """The call of fit/validate/test/predict in flight: what it was given, what it returns, and the trainer's parts
    it uses."""

    loaders: dict[str, Any]
    verbose: bool
    return_predictions: bool
    results: list[dict[str, float]]
    predictions: Any
    prediction_record: Any
    model: LightningModule
    hooks: HookRunner
    metrics: MetricsCollector
    optimization: Optimization
    profiler: Any

    @property
    def trainer(self) -> TrainerView: ...

    @property
    def flow(self) -> FlowView: ...

    @property
    def fit_loop(self) -> FitLoop: ...

    @property
    def fit_validation(self) -> FitValidation: ...


class TrainerView(Protocol):
    @property
    def run(self) -> RunView | None:
        """The call of fit/validate/test/predict in flight; None between calls."""
        ...

    # ---- loops and their counters
    fit_loop: FitLoop
    fit_validation: FitValidation
    validate_progress: BatchProgress
    test_progress: BatchProgress
    predict_progress: BatchProgress
    should_stop: bool
    received_sigterm: bool
    num_val_batches: list[int | float]
    num_sanity_val_batches: list[int | float]
    num_test_batches: list[int | float]
    num_predict_batches: list[int | float]
    val_dataloaders: Any
    test_dataloaders: Any
    predict_dataloaders: Any

    # ---- flags
    max_epochs: int
    min_epochs: int
    max_steps: int
    min_steps: int | None
    limit_train_batches: int | float
    limit_val_batches: int | float
    limit_test_batches: int | float
    limit_predict_batches: int | float
    overfit_batches: int | float
    fast_dev_run: int | bool
    val_check_interval: int | float | str | timedelta | dict[str, int]
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int
    log_every_n_steps: int
    accumulate_grad_batches: int
    gradient_clip_val: int | float | None
    gradient_clip_algorithm: str | None
    inference_mode: bool
    detect_anomaly: bool
    reload_dataloaders_every_n_epochs: int
    use_distributed_sampler: bool

    enable_autolog_hparams: bool
    history_dump_path: str | None

    # ---- what the run works on
    strategy: Strategy
    profiler: Any
    callbacks: list[Callback]
    loggers: list[Logger]
    datamodule: LightningDataModule | None

    @property
    def lightning_module(self) -> LightningModule | None: ...

    @property
    def logger(self) -> Logger | None: ...

    @property
    def state(self) -> StateView: ...

    @property
    def sanity_checking(self) -> bool: ...

    @property
    def current_epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    @property
    def num_training_batches(self) -> int | float: ...

    @property
    def is_last_batch(self) -> bool: ...

    @property
    def enable_validation(self) -> bool: ...

    @property
    def val_check_seconds(self) -> float | None: ...

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]: ...

    @property
    def progress_bar_metrics(self) -> dict[str, float]: ...

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]: ...

    @property
    def lr_scheduler_configs(self) -> list[LRSchedulerConfig]: ...

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]: ...

    @property
    def checkpoint_callback(self) -> Checkpoint | None: ...

    @property
    def checkpoint_callbacks(self) -> list[Checkpoint]: ...

    @property
    def train_dataloader(self) -> Any: ...

    @property
    def default_root_dir(self) -> str: ...

    @property
    def log_dir(self) -> str | None: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def is_global_zero(self) -> bool: ...

    @property
    def world_size(self) -> int: ...

    @property
    def global_rank(self) -> int: ...

    def save_checkpoint(self, filepath: Any, weights_only: bool | None = None, storage_options: Any = None) -> None: ...

    def dump_history(self, path: Any, storage_options: dict[str, Any] | None = None) -> str: ...


def module_of(trainer: TrainerView) -> LightningModule:
    """The module of the run in flight; the loops only run inside fit/validate/test/predict, where there is one."""
    module = trainer.lightning_module
    if module is None:
        raise RuntimeError("no LightningModule is attached: the loops run inside fit, validate, test or predict")
    return module


def run_of(trainer: TrainerView) -> RunView:
    """The call of fit/validate/test/predict in flight."""
    run = trainer.run
    if run is None:
        raise RuntimeError("no run is in flight: the loops run inside fit, validate, test or predict")
    return run
