"""The contract between the planes, as typed Protocols: what the loops in `stages` and the machine's callbacks in
`statemachine` may use of the Trainer, of the run in flight, and of the loops' parts.

The Trainer (in `statemachine`) implements `TrainerView` and its `Run` implements `RunView`; the hook runner, the
metrics, the optimization and the loops implement the views below. Code in `stages` takes these views and uses
nothing else of them, so mypy catches a misspelled or missing member. This module imports no implementation: the
only types it names are the user-facing API classes (LightningModule, LightningDataModule, Callback, Logger,
progress counters), which depend on nothing of the loops, and the hardware plane's Strategy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from datetime import timedelta

    import torch

    from devices.strategy import Strategy
    from stages.callbacks.callback import Callback, Checkpoint
    from stages.datamodule import LightningDataModule
    from stages.loggers.logger import Logger
    from stages.module import LightningModule
    from stages.progress import BatchProgress, Progress, StepProgress, ZeroGradProgress


class StageView(Protocol):
    """The running stage, as the machine's state names it (`statemachine.engine.enums.RunningStage`)."""

    @property
    def dataloader_prefix(self) -> str: ...


class StateView(Protocol):
    @property
    def fn(self) -> str | None:
        """The trainer function of the machine's state (`statemachine.engine.enums.TrainerFn`, a str)."""
        ...

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
    def may_pass(self, trigger: str) -> bool: ...


class HooksView(Protocol):
    """Calling users' hooks in Lightning's owner order (`stages.hooks.HookRunner`)."""

    def reset(self) -> None: ...
    def all_default(self, names: tuple[str, ...]) -> bool: ...
    def callbacks(self, name: str, *args: Any, **kwargs: Any) -> None: ...
    def callbacks_each(self, name: str, *args: Any) -> list[tuple[Callback, BaseException]]: ...
    def callbacks_where(self, name: str, monitoring: bool, *args: Any) -> None: ...
    def module(self, name: str, *args: Any, **kwargs: Any) -> Any: ...
    def step_method(self, name: str) -> Callable[[Any, int], Any]: ...
    def naming(self, name: str | None) -> AbstractContextManager[None]: ...
    def module_overrides(self, name: str) -> bool: ...
    def module_overrides_any(self, names: tuple[str, ...]) -> bool: ...
    def datamodule(self, name: str, *args: Any, **kwargs: Any) -> Any: ...


class MetricsView(Protocol):
    """What `self.log` collects and the views users read (`stages.metrics.MetricsCollector`)."""

    current_batch: Any
    dataloader_idx: int
    num_dataloaders: int

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]: ...

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]: ...

    @property
    def progress_bar_metrics(self) -> dict[str, float]: ...

    def log(self, *args: Any, **kwargs: Any) -> None: ...
    def publish(self, values: Mapping[str, torch.Tensor], *, to_callbacks: bool, to_logged: bool) -> None: ...
    def adopt(
        self, callback_metrics: Mapping[str, torch.Tensor], logged_metrics: Mapping[str, torch.Tensor]
    ) -> None: ...
    def epoch_end_reached(self, bucket_name: str) -> None: ...
    def step_end(self, bucket_name: str, step: int | None, send_to_loggers: Callable[[], bool]) -> None: ...
    def epoch_end(self, bucket_name: str, step: int, send_to_loggers: bool) -> dict[str, torch.Tensor]: ...
    def bucket(self, bucket_name: str) -> Mapping[str, object]: ...
    def reset_bucket(self, bucket_name: str) -> None: ...
    def reset_all(self) -> None: ...
    def eval_results(self, reduced: Mapping[str, torch.Tensor], num_dataloaders: int) -> list[dict[str, float]]: ...


class OptimizationView(Protocol):
    """The run's optimizers and schedulers (`stages.optimization.Optimization`)."""

    optimizers: list[torch.optim.Optimizer]
    lightning_optimizers: list[Any]
    lr_scheduler_configs: list[Any]

    def setup(self, module: Any) -> None: ...
    def check_loss(self, loss: torch.Tensor) -> None: ...
    def run_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None: ...
    def step_schedulers(self, interval: str, index: int, plateau: bool) -> None: ...
    def state_dicts(self, module: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...
    def load_state_dicts(
        self, module: Any, optimizer_states: list[dict[str, Any]], scheduler_states: list[dict[str, Any]]
    ) -> None: ...


class FitValidationView(Protocol):
    """The validation loaders of a fit (`stages.evaluation.FitValidation`)."""

    loaders: list[Any] | None

    @property
    def needs_loaders(self) -> bool: ...

    def load_loaders(self) -> None: ...
    def teardown(self) -> None: ...
    def run_sanity_check(self) -> str: ...
    def run(self) -> str: ...


class FitLoopView(Protocol):
    """The fit loop: its counters, its progress in Lightning's checkpoint layout, and its handlers
    (`stages.training.FitLoop`)."""

    epoch_progress: Progress
    batch_progress: BatchProgress
    scheduler_progress: StepProgress
    optimizer_step_progress: StepProgress
    zero_grad_progress: ZeroGradProgress
    manual_step_progress: StepProgress
    val_progress: BatchProgress
    batches_that_stepped: int
    num_training_batches: int | float
    val_check_batch: int | float | None
    last_val_end_time: float
    batch_idx: int
    is_last_batch: bool
    epoch_validates: bool
    fetches_itself: bool
    stepped_this_batch: bool
    resume_point: Any
    loaded_train: Any
    told_minimums_wait: bool

    @property
    def train_loader(self) -> Any: ...

    @property
    def epoch_loop(self) -> Any: ...

    @property
    def total_batch_idx(self) -> int: ...

    @property
    def current_epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    @property
    def batch_in_flight(self) -> int | None: ...

    def time_for_validation(self) -> bool: ...
    def epoch_validates_at(self, epoch: int) -> bool: ...
    def on_optimizer_stepped(self) -> None: ...
    def should_log(self) -> bool: ...
    def setup_data(self) -> str: ...
    def between_epochs(self) -> str: ...
    def run(self) -> str | None: ...
    def run_epoch(self) -> None: ...
    def load_train_data(self) -> None: ...
    def start_training(self) -> None: ...
    def teardown(self) -> None: ...
    def snapshot(self) -> dict[str, Any]: ...
    def restore_snapshot(self, state: dict[str, Any]) -> None: ...
    def resume_state(self) -> dict[str, Any]: ...
    def load_resume_state(self, state: dict[str, Any] | None) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class EvaluationLoopStateView(Protocol):
    """`trainer.validate_loop` and its kin, as a checkpoint stores them."""

    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


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
    profiler: Any

    @property
    def hooks(self) -> HooksView: ...

    @property
    def metrics(self) -> MetricsView: ...

    @property
    def optimization(self) -> OptimizationView: ...

    @property
    def trainer(self) -> TrainerView: ...

    @property
    def flow(self) -> FlowView: ...

    @property
    def fit_loop(self) -> FitLoopView: ...

    @property
    def fit_validation(self) -> FitValidationView: ...


class TrainerView(Protocol):
    @property
    def run(self) -> RunView | None:
        """The call of fit/validate/test/predict in flight; None between calls."""
        ...

    # ---- loops and their counters
    @property
    def fit_loop(self) -> FitLoopView: ...

    @property
    def fit_validation(self) -> FitValidationView: ...

    validate_progress: BatchProgress
    test_progress: BatchProgress
    predict_progress: BatchProgress

    @property
    def validate_loop(self) -> EvaluationLoopStateView: ...

    @property
    def test_loop(self) -> EvaluationLoopStateView: ...

    @property
    def predict_loop(self) -> EvaluationLoopStateView: ...

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
    num_sanity_val_steps: int | float
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
    def lightning_optimizers(self) -> list[Any]: ...

    @property
    def lr_scheduler_configs(self) -> list[Any]: ...

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
    def num_devices(self) -> int: ...

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
