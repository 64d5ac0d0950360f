"""The Trainer: Lightning 2.6's constructor and entry points, driving one declarative state machine."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

import devices
from stages import configuration, data
from stages.callbacks.callback import Callback, Checkpoint, checkpoints_last
from stages.callbacks.early_stopping import EarlyStopping
from stages.callbacks.model_checkpoint import ModelCheckpoint
from stages.callbacks.model_summary import ModelSummary
from stages.callbacks.progress import ProgressBar, TQDMProgressBar
from stages.callbacks.rich_model_summary import RichModelSummary
from stages.callbacks.rich_progress import RichProgressBar
from stages.callbacks.rich_support import rich_available
from stages.callbacks.timer import Timer, parse_duration
from stages.combined_loader import CombinedLoader
from stages.console import show_info_on_the_console
from stages.datamodule import LightningDataModule
from stages.evaluation import FitValidation
from stages.exceptions import MisconfigurationException, PossibleUserWarning, TrainerWarning
from stages.hooks import is_overridden
from stages.loggers import DummyLogger, Logger, TensorBoardLogger
from stages.loop_views import EvaluationLoopView
from stages.metrics import MetricsCollector
from stages.module import LightningModule
from stages.optimization import LightningOptimizer, LRSchedulerConfig, Optimization
from stages.progress import BatchProgress
from stages.rank_zero import rank_zero_info, rank_zero_warn
from stages.training import FitLoop
from statemachine import distributed, profilers
from statemachine.config import InvalidTrainerArguments, TrainerConfig, environment_defaults, validate_config
from statemachine.engine import enums as states
from statemachine.engine.enums import RunningStage, TrainerFn, TrainerState
from statemachine.engine.machine import Flow, table_for
from statemachine.engine.table import TABLE, MachineTable
from statemachine.engine.trace import HistoryRecords
from statemachine.profilers import Profiler
from statemachine.profilers.runner import active_profiler, hook_runner
from statemachine.run import Run
from statemachine.signals import SignalConnector

_log = logging.getLogger(__name__)

# `lightning.pytorch.trainer.states` has the same path here, while this module stays a single file
sys.modules[f"{__name__}.states"] = states


def _defaults_from_env(init: Callable[..., None]) -> Callable[..., None]:
    """`PL_<CLASSNAME>_<ARG>` environment values become defaults; explicit arguments still win."""
    names = set(inspect.signature(init).parameters) - {"self", "table"}

    @functools.wraps(init)
    def wrapper(self: Trainer, **kwargs: Any) -> None:
        init(self, **{**environment_defaults(type(self).__name__, names), **kwargs})

    return wrapper


class Trainer:
    @_defaults_from_env
    def __init__(
        self,
        *,
        accelerator: str | Any = "auto",
        strategy: str | Any = "auto",
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        precision: int | str | None = None,
        logger: Logger | list[Logger] | bool | None = None,
        callbacks: list[Callback] | Callback | None = None,
        fast_dev_run: int | bool = False,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        max_time: str | Any | dict[str, int] | None = None,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0,
        val_check_interval: int | float | str | Any | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None,
        enable_checkpointing: bool | None = None,
        enable_progress_bar: bool | None = None,
        enable_model_summary: bool | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
        deterministic: bool | str | None = None,
        benchmark: bool | None = None,
        inference_mode: bool = True,
        use_distributed_sampler: bool = True,
        profiler: Profiler | str | None = None,
        detect_anomaly: bool = False,
        barebones: bool = False,
        plugins: Any = None,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        default_root_dir: str | os.PathLike[str] | None = None,
        enable_autolog_hparams: bool = True,
        model_registry: str | None = None,
        table: MachineTable = TABLE,
    ) -> None:
        """Lightning's arguments, plus `table`: the machine to run (the built-in one, or one derived from it
        with `TABLE.extend(...)`)."""
        if not isinstance(table, MachineTable):
            raise InvalidTrainerArguments(
                f"invalid Trainer arguments:\n  table: expected a MachineTable (statemachine.TABLE or one made "
                f"with TABLE.extend), got {type(table).__name__}"
            )
        arguments = {name: value for name, value in locals().items() if name not in ("self", "__class__", "table")}
        show_info_on_the_console()
        config, self.strategy = _validated(arguments)
        _say_devices(self.strategy)
        self._apply_flags(config)
        if not self.fast_dev_run:
            _say_what_one_means(arguments)
        self.profiler = profilers.resolve(config.profiler)
        self._active_profiler = active_profiler(self.profiler)  # None when off: the loops time nothing
        self._hooks = hook_runner(self, self.profiler)
        self._metrics = MetricsCollector(self)
        self._optimization = Optimization(self)
        self._signals = SignalConnector(self)
        self.fit_loop = FitLoop(self)
        self.fit_validation = FitValidation(self)
        self.validate_progress = BatchProgress()
        self.test_progress = BatchProgress()
        self.predict_progress = BatchProgress()
        self.validate_loop = EvaluationLoopView(self, "val")
        self.test_loop = EvaluationLoopView(self, "test")
        self.predict_loop = EvaluationLoopView(self, "predict")
        self._run: Run | None = None
        self._model: LightningModule | None = None
        self.datamodule: LightningDataModule | None = None
        self._last_fn: TrainerFn | None = None
        self.should_stop = False
        self.received_sigterm = False
        self.history_dump_path: str | None = None
        self._ckpt_path: str | None = None  # the checkpoint the last run loaded, or the one the user set
        self._ckpt_path_user_set = False
        self.num_val_batches: list[int | float] = []
        self.num_sanity_val_batches: list[int | float] = []
        self.num_test_batches: list[int | float] = []
        self.num_predict_batches: list[int | float] = []
        self.val_dataloaders: Any = None
        self.test_dataloaders: Any = None
        self.predict_dataloaders: Any = None
        self.callbacks = self._build_callbacks(config)
        self.loggers = self._build_loggers(config)
        self._flow = Flow(table)

    # ---- construction -----------------------------------------------------------------------------------

    def _apply_flags(self, config: TrainerConfig) -> None:
        barebones = config.barebones
        self.barebones = barebones
        if barebones:
            _log.info(
                "You are running in `Trainer(barebones=True)` mode. All features that may impact raw speed have been "
                "disabled to facilitate analyzing the Trainer overhead. Specifically, the following features are "
                "deactivated:\n" + "\n".join(_BAREBONES_OFF)
            )
        self.fast_dev_run = config.fast_dev_run
        self.max_steps = config.max_steps
        self.min_steps = config.min_steps
        self.min_epochs = config.min_epochs if config.min_epochs is not None else (1 if config.min_steps else 0)
        self.overfit_batches = config.overfit_batches
        self.reload_dataloaders_every_n_epochs = config.reload_dataloaders_every_n_epochs
        self.limit_train_batches = config.limit_train_batches
        self.limit_val_batches = config.limit_val_batches
        self.limit_test_batches = config.limit_test_batches
        self.limit_predict_batches = config.limit_predict_batches
        self.val_check_interval = 1.0 if config.val_check_interval is None else config.val_check_interval
        self.check_val_every_n_epoch = config.check_val_every_n_epoch
        default_sanity = 0 if barebones else 2
        sanity = default_sanity if config.num_sanity_val_steps is None else config.num_sanity_val_steps
        # -1 is "every batch", which the trainer keeps as inf (as Lightning shows it)
        self.num_sanity_val_steps: int | float = float("inf") if sanity == -1 else sanity
        self.log_every_n_steps = (
            (0 if barebones else 50) if config.log_every_n_steps is None else config.log_every_n_steps
        )
        self.accumulate_grad_batches = config.accumulate_grad_batches
        self.gradient_clip_val = config.gradient_clip_val
        self.gradient_clip_algorithm = config.gradient_clip_algorithm
        self.inference_mode = config.inference_mode
        self.use_distributed_sampler = config.use_distributed_sampler
        self.detect_anomaly = config.detect_anomaly
        self.enable_autolog_hparams = config.enable_autolog_hparams
        self._default_root_dir = _root_dir(config.default_root_dir)
        self.max_time = parse_duration(config.max_time)
        given = config.callbacks if isinstance(config.callbacks, list | tuple) else [config.callbacks]
        has_timer = self.max_time is not None or any(isinstance(c, Timer) for c in given)
        # fast_dev_run sets its own limits, so the 1000-epoch default (and its warning) does not apply.
        self._max_epochs_defaulted = (
            config.max_epochs is None and self.max_steps == -1 and not has_timer and not self.fast_dev_run
        )
        unlimited = 1000 if self._max_epochs_defaulted else -1
        self.max_epochs: int = config.max_epochs if config.max_epochs is not None else unlimited
        if self.overfit_batches > 0:
            self.limit_train_batches = self.limit_val_batches = self.overfit_batches
        self._apply_fast_dev_run()
        self._apply_determinism(config)

    def _apply_fast_dev_run(self) -> None:
        """Reference 3.6: a few batches of everything, no sanity check, no checkpoints, no logging."""
        if not self.fast_dev_run:
            return
        n = int(self.fast_dev_run)
        _log.info(
            "Running in `fast_dev_run` mode: will run the requested loop using %s batch(es). Logging and "
            "checkpointing is suppressed.",
            n,
        )
        if self.overfit_batches == 0:
            self.limit_train_batches = self.limit_val_batches = n
        self.limit_test_batches = self.limit_predict_batches = n
        self.max_steps, self.max_epochs, self.num_sanity_val_steps = n, 1, 0
        self.val_check_interval, self.check_val_every_n_epoch = 1.0, 1

    def _apply_determinism(self, config: TrainerConfig) -> None:
        if config.deterministic is not None:
            torch.use_deterministic_algorithms(bool(config.deterministic), warn_only=config.deterministic == "warn")
            if config.deterministic:
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if config.benchmark is not None:
            torch.backends.cudnn.benchmark = config.benchmark
        elif config.deterministic:
            torch.backends.cudnn.benchmark = False

    def _build_callbacks(self, config: TrainerConfig) -> list[Callback]:
        given = config.callbacks
        user = [given] if isinstance(given, Callback) else list(given or [])
        bad = [type(c).__name__ for c in user if not isinstance(c, Callback)]
        if bad:
            raise InvalidTrainerArguments(f"invalid Trainer arguments:\n  callbacks: not Callback instances: {bad}")
        on = not config.barebones
        # Under fast_dev_run the callback is there (users read trainer.checkpoint_callback) but never saves.
        if _flag(config.enable_checkpointing, on) and not any(isinstance(c, Checkpoint) for c in user):
            user.append(ModelCheckpoint())
        if not _flag(config.enable_checkpointing, on) and any(isinstance(c, Checkpoint) for c in user):
            raise InvalidTrainerArguments(
                "invalid Trainer arguments:\n  enable_checkpointing=False conflicts with the checkpoint callback given"
            )
        if self.max_time is not None and not any(isinstance(c, Timer) for c in user):
            user.append(Timer(duration=self.max_time, interval="step"))
        _add_progress_bar(user, _flag(config.enable_progress_bar, on))
        if _flag(config.enable_model_summary, on):
            given_summaries = [type(c) for c in user if isinstance(c, ModelSummary)]
            if given_summaries:
                rank_zero_info(
                    f"Trainer already configured with model summary callbacks: {given_summaries}. Skipping setting a "
                    "default `ModelSummary` callback."
                )
            else:
                user.append(RichModelSummary() if rich_available() else ModelSummary())  # Lightning's choice
        return checkpoints_last(user)

    def _build_loggers(self, config: TrainerConfig) -> list[Logger]:
        given = config.logger
        if given is False or (given is None and config.barebones):
            return []
        if self.fast_dev_run:
            return [DummyLogger()]
        if given is None or given is True:
            return [TensorBoardLogger(save_dir=self._default_root_dir)]
        loggers = list(given) if isinstance(given, list | tuple) else [given]
        bad = [type(lg).__name__ for lg in loggers if not isinstance(lg, Logger)]
        if bad:
            raise InvalidTrainerArguments(f"invalid Trainer arguments:\n  logger: not Logger instances: {bad}")
        return loggers

    # ---- entry points -----------------------------------------------------------------------------------

    def fit(
        self,
        model: LightningModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool | None = None,
    ) -> None:
        """Train `model`; `ckpt_path` resumes from a checkpoint, read with torch's safe unpickling when
        `weights_only=True` (checkpoints holding arbitrary objects then fail to load)."""
        self._refuse_reentry("fit")
        if isinstance(train_dataloaders, LightningDataModule):
            train_dataloaders, datamodule = None, train_dataloaders
        _check_model(model, "fit")
        _check_data_arguments("fit", datamodule, train_dataloaders=train_dataloaders, val_dataloaders=val_dataloaders)
        configuration.check_fit(model, datamodule, val_dataloaders)
        self.should_stop = False
        if self._max_epochs_defaulted:
            warnings.warn(
                "`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set "
                "`max_epochs=-1`.",
                PossibleUserWarning,
                stacklevel=2,
            )
        loaders = {"train": train_dataloaders, "val": val_dataloaders}
        self._execute(
            "fit",
            TrainerFn.FITTING,
            model,
            datamodule,
            loaders,
            ckpt_path,
            model_passed=True,
            weights_only=bool(weights_only),
        )

    def validate(
        self,
        model: LightningModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        verbose: bool = True,
        datamodule: LightningDataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Validate `model` (or the fitted one); `ckpt_path` loads weights first, with torch's safe unpickling
        when `weights_only=True`."""
        return self._evaluate(
            "validate", TrainerFn.VALIDATING, "val", model, dataloaders, ckpt_path, verbose, datamodule, weights_only
        )

    def test(
        self,
        model: LightningModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        verbose: bool = True,
        datamodule: LightningDataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Test `model` (or the fitted one); `ckpt_path` and `weights_only` as for `validate`."""
        return self._evaluate(
            "test", TrainerFn.TESTING, "test", model, dataloaders, ckpt_path, verbose, datamodule, weights_only
        )

    def predict(
        self,
        model: LightningModule | None = None,
        dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        return_predictions: bool | None = None,
        ckpt_path: str | os.PathLike[str] | None = None,
        weights_only: bool | None = None,
    ) -> Any:
        """Predict with `model` (or the fitted one); `ckpt_path` and `weights_only` as for `validate`."""
        self._refuse_reentry("predict")
        if isinstance(dataloaders, LightningDataModule):
            dataloaders, datamodule = None, dataloaders
        _check_data_arguments("predict", datamodule, dataloaders=dataloaders)
        module = self._model_for("predict", model)
        configuration.check_predict(module)
        run = self._execute(
            "predict",
            TrainerFn.PREDICTING,
            module,
            datamodule,
            {"predict": dataloaders},
            ckpt_path,
            model_passed=model is not None,
            return_predictions=distributed.default_return_predictions(self, return_predictions),
            weights_only=bool(weights_only),
        )
        return run.predictions

    def _evaluate(
        self,
        trigger: str,
        fn: TrainerFn,
        kind: str,
        model: LightningModule | None,
        dataloaders: Any,
        ckpt_path: Any,
        verbose: bool,
        datamodule: LightningDataModule | None,
        weights_only: bool | None,
    ) -> list[dict[str, float]]:
        self._refuse_reentry(trigger)
        if isinstance(dataloaders, LightningDataModule):
            dataloaders, datamodule = None, dataloaders
        module = self._model_for(trigger, model)
        step = "validation_step" if kind == "val" else "test_step"
        if not is_overridden(step, module, LightningModule):
            raise MisconfigurationException(f"{type(module).__name__} has no {step}(), which Trainer.{trigger} needs")
        _check_data_arguments(trigger, datamodule, dataloaders=dataloaders)
        run = self._execute(
            trigger,
            fn,
            module,
            datamodule,
            {kind: dataloaders},
            ckpt_path,
            model_passed=model is not None,
            verbose=verbose,
            weights_only=bool(weights_only),
        )
        return run.results

    def _model_for(self, trigger: str, model: LightningModule | None) -> LightningModule:
        if model is None:
            if self._model is None:
                raise TypeError(
                    f"`Trainer.{trigger}()` requires a `LightningModule` when it hasn't been passed in a previous run: "
                    "pass one, or call it after fit so the fitted one is used"
                )
            return self._model
        _check_model(model, trigger)
        return model

    def _execute(
        self,
        trigger: str,
        fn: TrainerFn,
        model: LightningModule,
        datamodule: LightningDataModule | None,
        loaders: dict[str, Any],
        ckpt_path: Any,
        model_passed: bool,
        **options: Any,
    ) -> Run:
        if self._ckpt_path_user_set and ckpt_path is not None:
            warnings.warn(
                "trainer.ckpt_path was set and a ckpt_path was passed; using the argument", TrainerWarning, stacklevel=3
            )
            self._ckpt_path_user_set = False
        chosen = ckpt_path if ckpt_path is not None or not self._ckpt_path_user_set else self._ckpt_path
        # Callbacks that run states of their own (the tuner's finders) extend the machine before the run.
        self._flow = self._flow.with_table(table_for(self._flow.table, self.callbacks))
        run = self._run = self._flow.context = Run(
            trainer=self,
            fn=fn,
            model=model,
            datamodule=datamodule,
            loaders=loaders,
            ckpt_path_arg=None if chosen is None else os.fspath(chosen),
            flow=self._flow,
            hooks=self._hooks,
            metrics=self._metrics,
            optimization=self._optimization,
            signals=self._signals,
            profiler=self._active_profiler,
            attach=self._attach,
            model_passed=model_passed,
            **options,
        )
        self._last_fn = fn
        try:
            distributed.run(run, trigger)
        except KeyboardInterrupt as interrupt:
            if interrupt is not run.exception:
                raise  # raised by a hook while the run was shutting down: it stands as it is
            # As Lightning: once the interrupt edge has shut the run down, Ctrl-C ends the program with status 1.
            raise SystemExit(1) from interrupt
        finally:
            # Nothing of the call outlives it (its results and predictions may be large).
            self._run = None
            del self._flow.context
            if not self._ckpt_path_user_set:  # a path the user set stays until an argument replaces it
                self._ckpt_path = run.ckpt_path
        return run

    def _refuse_reentry(self, trigger: str) -> None:
        # A run lasts until its entry point returns: its interrupt edge (on_exception hooks) rests in `interrupted`.
        if self._run is not None:
            raise RuntimeError(
                f"Trainer.{trigger}() was called while the trainer is running (state {self._flow.machine_state!r}); "
                "call it after the current run returns"
            )

    def _attach(self, model: LightningModule, datamodule: LightningDataModule | None) -> None:
        """The run's model and datamodule become this trainer's; they stay after the call returns."""
        self._model = model
        model.trainer = self
        self.datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = self

    # ---- state ------------------------------------------------------------------------------------------

    @property
    def state(self) -> TrainerState:
        spec = self._flow.spec
        fn = spec.fn if spec.fn is not None or spec.name == "idle" else self._last_fn
        run = self._run
        # inlined `_stage`: `self.log` reads the state on every call
        stage = run.failed_stage if run is not None and run.failed_stage is not None else spec.stage
        return TrainerState(status=spec.status, fn=fn, stage=stage)

    @property
    def table(self) -> MachineTable:
        """The machine table this trainer runs on (the tuner's states are added to it when a finder needs them)."""
        return self._flow.table

    @property
    def run(self) -> Run | None:
        """The fit/validate/test/predict call in flight (its model, data, loops' parts and results); None between
        calls."""
        return self._run

    @property
    def _stage(self) -> RunningStage | None:
        run = self._run
        if run is not None and run.failed_stage is not None:
            return run.failed_stage  # the interrupt edge's callbacks are running
        return self._flow.spec.stage

    def _stage_is(self, stage: RunningStage) -> bool:
        return self._stage == stage

    training = property(lambda self: self._stage_is(RunningStage.TRAINING), doc="True while training.")
    sanity_checking = property(lambda self: self._stage_is(RunningStage.SANITY_CHECKING))
    validating = property(lambda self: self._stage_is(RunningStage.VALIDATING))
    testing = property(lambda self: self._stage_is(RunningStage.TESTING))
    predicting = property(lambda self: self._stage_is(RunningStage.PREDICTING))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _READ_ONLY_STAGES:
            raise AttributeError(
                f"trainer.{name} is a read-only view of the state machine; the stage changes only through the "
                f"machine's transitions ({_READ_ONLY_STAGES[name]})"
            )
        super().__setattr__(name, value)

    @property
    def evaluating(self) -> bool:
        stage = self._stage
        return stage is not None and stage.evaluating

    @property
    def interrupted(self) -> bool:
        return self._flow.machine_state == "interrupted"

    @property
    def history(self) -> HistoryRecords:
        """The state history, a list of transition records; `trainer.history.to_trace(path)` writes its timeline."""
        return HistoryRecords(self._flow.history.records)

    def dump_history(self, path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> str:
        """Write the state history as JSON to any fsspec URL (local path, memory://, s3://)."""
        return self._flow.history.dump(os.fspath(path), table=self._flow.table, storage_options=storage_options)

    # ---- counters and results ---------------------------------------------------------------------------

    @property
    def current_epoch(self) -> int:
        return self.fit_loop.current_epoch

    @property
    def global_step(self) -> int:
        return self.fit_loop.global_step

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        return self._metrics.callback_metrics

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        return self._metrics.logged_metrics

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return self._metrics.progress_bar_metrics

    @property
    def num_training_batches(self) -> int | float:
        return self.fit_loop.num_training_batches

    @property
    def is_last_batch(self) -> bool:
        return self.fit_loop.is_last_batch

    @property
    def enable_validation(self) -> bool:
        """A val source exists, `validation_step` is overridden and `limit_val_batches > 0`."""
        if self._run is None or self.limit_val_batches == 0:
            return False
        return is_overridden("validation_step", self.lightning_module, LightningModule) and data.has_source(self, "val")

    @property
    def val_check_seconds(self) -> float | None:
        interval = self.val_check_interval
        duration = None if isinstance(interval, int | float) else parse_duration(interval)
        return None if duration is None else duration.total_seconds()

    @property
    def val_check_batch(self) -> int | float | None:
        """Validate every this many training batches; None when validation is scheduled by time."""
        return self.fit_loop.val_check_batch

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps the whole fit will take, as far as the limits allow to know.

        Inside `configure_optimizers` (before training starts) the training loader is requested early, so
        schedulers such as OneCycleLR can size themselves.
        """
        running_fit = self._run is not None and self._run.fn == TrainerFn.FITTING
        if running_fit and self.fit_loop.train_loader is None and self.max_epochs != -1:
            self.fit_loop.load_train_data()
        per_epoch = self.num_training_batches
        if per_epoch == float("inf"):
            return float("inf") if self.max_steps == -1 else self.max_steps
        steps_per_epoch = -(-int(per_epoch) // self.accumulate_grad_batches)
        total = float("inf") if self.max_epochs == -1 else steps_per_epoch * self.max_epochs
        return total if self.max_steps == -1 else min(total, self.max_steps)

    # ---- model, data and plumbing -----------------------------------------------------------------------

    @property
    def lightning_module(self) -> LightningModule | None:
        return self._model

    @property
    def model(self) -> LightningModule | None:
        return self._model

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return self._optimization.optimizers

    @property
    def lightning_optimizers(self) -> list[LightningOptimizer]:
        """`optimizers` wrapped as `LightningModule.optimizers()` returns them; they outlive the run, as Lightning's."""
        return self._optimization.lightning_optimizers

    @property
    def lr_scheduler_configs(self) -> list[LRSchedulerConfig]:
        return self._optimization.lr_scheduler_configs

    @property
    def train_dataloader(self) -> Any:
        """The training loader(s) as given (a collection of loaders, not the CombinedLoader wrapping it), from the
        fit in flight or the last one, until another trainer call starts."""
        loader = self.fit_loop.loaded_train
        return loader.iterables if isinstance(loader, CombinedLoader) else loader

    @property
    def logger(self) -> Logger | None:
        return self.loggers[0] if self.loggers else None

    @logger.setter
    def logger(self, logger: Logger | None) -> None:
        """Replace the loggers with this one (None: no logger)."""
        self.loggers = [logger] if logger else []

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the current or last fit/validate/test/predict loaded ("best" and "last" resolved to the
        file); None when it loaded none. Setting it makes the following calls load that file."""
        return self._run.ckpt_path if self._run is not None else self._ckpt_path

    @ckpt_path.setter
    def ckpt_path(self, path: str | os.PathLike[str] | None) -> None:
        self._ckpt_path = None if path is None else os.fspath(path)
        self._ckpt_path_user_set = path is not None

    def print(self, *args: Any, **kwargs: Any) -> None:
        """`print` on global rank zero only."""
        if self.is_global_zero:
            print(*args, **kwargs)

    @property
    def default_root_dir(self) -> str:
        return self._default_root_dir

    @property
    def log_dir(self) -> str | None:
        """The first logger's directory; the root dir when there is no logger."""
        logger = self.logger
        if logger is None:
            return self.default_root_dir
        return logger.log_dir or logger.save_dir or self.default_root_dir

    @property
    def checkpoint_callbacks(self) -> list[Checkpoint]:
        return [c for c in self.callbacks if isinstance(c, Checkpoint)]

    @property
    def checkpoint_callback(self) -> Checkpoint | None:
        found = self.checkpoint_callbacks
        return found[0] if found else None

    @property
    def early_stopping_callbacks(self) -> list[EarlyStopping]:
        return [c for c in self.callbacks if isinstance(c, EarlyStopping)]

    @property
    def early_stopping_callback(self) -> EarlyStopping | None:
        found = self.early_stopping_callbacks
        return found[0] if found else None

    @property
    def progress_bar_callback(self) -> ProgressBar | None:
        return next((c for c in self.callbacks if isinstance(c, ProgressBar)), None)

    @property
    def accelerator(self) -> devices.Accelerator:
        return self.strategy.accelerator

    @property
    def precision(self) -> str:
        return self.strategy.precision.name

    @property
    def precision_plugin(self) -> devices.Precision:
        return self.strategy.precision

    @contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Build the model inside: its tensors are created on the run's device, in the precision's dtype.

        `empty_init=True` skips the weight initialisation, for weights a checkpoint will overwrite.
        """
        with self.strategy.tensor_init_context(empty_init=empty_init):
            yield

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def global_rank(self) -> int:
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self.strategy.node_rank

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def num_devices(self) -> int:
        return self.strategy.num_devices

    @property
    def num_nodes(self) -> int:
        return self.strategy.num_nodes if isinstance(self.strategy, devices.ParallelStrategy) else 1

    @property
    def device_ids(self) -> list[int]:
        strategy = self.strategy
        used = strategy.parallel_devices if isinstance(strategy, devices.ParallelStrategy) else None
        # A device without an index (the CPU's processes) is numbered by its place, as in Lightning: [0, 1].
        return [
            position if device.index is None else device.index
            for position, device in enumerate(used or [strategy.root_device])
        ]

    def save_checkpoint(
        self, filepath: str | os.PathLike[str], weights_only: bool | None = None, storage_options: Any = None
    ) -> None:
        """Write a Lightning-format checkpoint atomically (local path or fsspec URL)."""
        from statemachine import checkpoint

        if self._model is None:
            raise AttributeError(
                "Saving a checkpoint is only possible if a model is attached to the Trainer. Did you call "
                "`Trainer.save_checkpoint()` before calling `Trainer.{fit,validate,test,predict}`?"
            )
        content = checkpoint.dump(self, self._hooks, self._optimization, weights_only=bool(weights_only))
        self.strategy.save_checkpoint(content, os.fspath(filepath), storage_options=storage_options)
        self.strategy.barrier("save_checkpoint")


_READ_ONLY_STAGES = {
    "training": "fit enters fitting.training",
    "sanity_checking": "begin enters fitting.sanity_checking",
    "validating": "val_check enters fitting.validating; validate enters validating",
    "testing": "test enters testing",
    "predicting": "predict enters predicting",
}


def _validated(arguments: dict[str, Any]) -> tuple[TrainerConfig, devices.Strategy]:
    """Validate the flags and the hardware together, so one error lists every bad field."""
    problems: list[str] = []
    config: TrainerConfig | None = None
    try:
        config = validate_config(arguments)
    except InvalidTrainerArguments as error:
        problems += str(error).splitlines()[1:]
    strategy: devices.Strategy | None = None
    try:
        strategy = devices.connect(
            accelerator=arguments["accelerator"],
            devices=arguments["devices"],
            strategy=arguments["strategy"],
            precision=arguments["precision"],
            num_nodes=arguments["num_nodes"],
            plugins=arguments["plugins"],
            sync_batchnorm=arguments["sync_batchnorm"],
        )
    except ValueError as error:
        problems += [f"  {line.strip()}" for line in str(error).splitlines() if line.strip()]
    if problems or config is None or strategy is None:
        raise InvalidTrainerArguments("invalid Trainer arguments:\n" + "\n".join(problems))
    return config, strategy


def _say_devices(strategy: devices.Strategy) -> None:
    """Lightning's two lines on the accelerators found and used."""
    cuda = devices.CUDAAccelerator.is_available()
    used = isinstance(strategy.accelerator, devices.CUDAAccelerator)
    rank_zero_info(f"GPU available: {cuda}{' (cuda)' if cuda else ''}, used: {used}")
    rank_zero_info("TPU available: False, using: 0 TPU cores")
    if cuda and not used:
        rank_zero_warn(
            "GPU available but not used. You can set it by doing `Trainer(accelerator='gpu')`.",
            category=PossibleUserWarning,
        )


# What barebones=True turns off, as Lightning lists it.
_BAREBONES_OFF = (
    " - Checkpointing: `Trainer(enable_checkpointing=True)`",
    " - Progress bar: `Trainer(enable_progress_bar=True)`",
    " - Model summary: `Trainer(enable_model_summary=True)`",
    " - Logging: `Trainer(logger=True)`, `Trainer(log_every_n_steps>0)`, `LightningModule.log(...)`, "
    "`LightningModule.log_dict(...)`",
    " - Sanity checking: `Trainer(num_sanity_val_steps>0)`",
    " - Development run: `Trainer(fast_dev_run=True)`",
    " - Anomaly detection: `Trainer(detect_anomaly=True)`",
    " - Profiling: `Trainer(profiler=...)`",
)
# What 1 (an int: one batch) and 1.0 (a float: all of them) mean for each flag that takes both.
_ONE_MEANS: dict[str, tuple[str, str]] = {
    "limit_train_batches": ("1 batch per epoch will be used.", "100% of the batches per epoch will be used.."),
    "limit_val_batches": ("1 batch will be used.", "100% of the batches will be used.."),
    "limit_test_batches": ("1 batch will be used.", "100% of the batches will be used.."),
    "limit_predict_batches": ("1 batch will be used.", "100% of the batches will be used.."),
    "overfit_batches": ("1 batch will be used.", "100% of the batches will be used.."),
    "val_check_interval": (
        "validation will run after every batch.",
        "validation will run at the end of the training epoch..",
    ),
}


def _say_what_one_means(arguments: dict[str, Any]) -> None:
    """A flag given as 1 or 1.0 reads alike but means one batch or every batch: say which, as Lightning does."""
    for name, (as_int, as_float) in _ONE_MEANS.items():
        value = arguments[name]
        if isinstance(value, bool) or value != 1:
            continue
        meaning = as_int if isinstance(value, int) else as_float
        _log.info("`Trainer(%s=%r)` was configured so %s", name, value, meaning)


def _flag(value: bool | None, default: bool) -> bool:
    return default if value is None else value


def _add_progress_bar(callbacks: list[Callback], enabled: bool) -> None:
    """The default bar when none is given (rich's when `rich` is installed, else tqdm's); a given one must be the
    only one, and the bar must be enabled."""
    bars = [c for c in callbacks if isinstance(c, ProgressBar)]
    if len(bars) > 1:
        raise InvalidTrainerArguments(
            "invalid Trainer arguments:\n  callbacks: You added multiple progress bar callbacks to the Trainer, but"
            f" currently only one progress bar is supported. Found: {[type(bar).__name__ for bar in bars]}"
        )
    if bars and not enabled:
        raise InvalidTrainerArguments(
            "invalid Trainer arguments:\n  enable_progress_bar: Trainer was configured with `enable_progress_bar=False`"
            f" but found `{type(bars[0]).__name__}` in callbacks list."
        )
    if enabled and not bars:
        callbacks.append(RichProgressBar() if rich_available() else TQDMProgressBar())  # Lightning's choice


def _check_model(model: Any, trigger: str) -> None:
    if not isinstance(model, LightningModule):
        raise TypeError(f"`model` must be a `LightningModule`, got `{type(model).__name__}` (in Trainer.{trigger})")


def _check_data_arguments(trigger: str, datamodule: Any, **loaders: Any) -> None:
    if datamodule is not None and not isinstance(datamodule, LightningDataModule):
        raise TypeError(f"datamodule must be a LightningDataModule; got {type(datamodule).__name__}")
    for name, value in loaders.items():
        data.check_argument(trigger, name, value)
    if datamodule is not None and any(loader is not None for loader in loaders.values()):
        raise MisconfigurationException("pass either dataloaders or a datamodule, not both")


def _root_dir(given: str | os.PathLike[str] | None) -> str:
    """The working directory by default; a local path with `~` expanded and normalised, a URL as given."""
    if not given:
        return os.getcwd()
    path = os.fspath(given)
    return path if "://" in path else os.path.normpath(os.path.expanduser(path))
