"""LightningModule: the user's model, with Lightning's hooks and helpers."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Generator, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from devices.transfer import map_leaves, move_to_device
from stages import saving
from stages.class_only import class_only
from stages.data_hooks import DataHooks
from stages.device_dtype import DeviceDtypeModuleMixin
from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.hparams import HyperparametersMixin


class LightningModule(HyperparametersMixin, DataHooks, DeviceDtypeModuleMixin):
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    # properties TorchScript must not compile (they reach the trainer or are plain Python)
    __jit_unused_properties__: list[str] = [
        "example_input_array",
        "on_gpu",
        "current_epoch",
        "global_step",
        "global_rank",
        "local_rank",
        "logger",
        "loggers",
        "trainer",
        "strict_loading",
        "device",
        "dtype",
        "hparams",
        "hparams_initial",
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: Any = None
        self._current_fx_name: str | None = None
        self._init_hparams()
        self._modes_before_eval: dict[str, bool] = {}
        self.automatic_optimization = True
        self._strict_loading: bool | None = None  # None: the user has not chosen
        self._init_data_hooks()
        self._example_input_array: Any = None

    # ---- trainer views -----------------------------------------------------------------------------------------------

    @property
    def trainer(self) -> Any:
        if self._trainer is None and not self.__dict__.get("_jit_is_scripting", False):
            raise RuntimeError(f"{type(self).__qualname__} is not attached to a `Trainer`.")
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: Any) -> None:
        self._trainer = trainer

    def __getstate__(self) -> dict[str, Any]:
        # a pickled or deep-copied module leaves its trainer behind
        return {**self.__dict__, "_trainer": None}

    @property
    def strict_loading(self) -> bool:
        """Whether checkpoint weights load with `load_state_dict(..., strict=True)` (the default)."""
        return self._strict_loading in (None, True)

    @strict_loading.setter
    def strict_loading(self, strict_loading: bool) -> None:
        self._strict_loading = strict_loading

    @property
    def example_input_array(self) -> Any:
        """A sample input for `forward`: the summary shows each layer's in/out sizes with it, and `to_onnx` and
        `to_torchscript(method="trace")` use it when given no input."""
        return self._example_input_array

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        self._example_input_array = example

    @property
    def on_gpu(self) -> bool:
        """Whether the module is on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def current_epoch(self) -> int:
        return 0 if self._trainer is None else self._trainer.current_epoch

    @property
    def global_step(self) -> int:
        return 0 if self._trainer is None else self._trainer.global_step

    @property
    def global_rank(self) -> int:
        return 0 if self._trainer is None else self._trainer.global_rank

    @property
    def local_rank(self) -> int:
        return 0 if self._trainer is None else self._trainer.local_rank

    @property
    def device_mesh(self) -> Any:
        """The strategy's `DeviceMesh` (ModelParallelStrategy, FSDPStrategy), for `configure_model` to
        parallelize with; None under a strategy without one."""
        return None if self._trainer is None else getattr(self._trainer.strategy, "device_mesh", None)

    @property
    def logger(self) -> Any:
        return None if self._trainer is None else self._trainer.logger

    @property
    def loggers(self) -> list[Any]:
        return [] if self._trainer is None else self._trainer.loggers

    # ---- logging -----------------------------------------------------------------------------------------------------

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Log a value; where it goes and how it is reduced follows the hook it is called from."""
        trainer, fx = self._trainer, self._current_fx_name
        if trainer is None:
            return
        if fx is None:
            raise MisconfigurationException(
                f"self.log({name!r}, ...) was called outside the Trainer's control flow; call it from a hook"
            )
        if trainer.barebones:
            warnings.warn(
                "You are trying to `self.log()` but `Trainer(barebones=True)` is configured. Logging can impact raw "
                "speed so it is disabled under this setting.",
                TrainerWarning,
                stacklevel=2,
            )
            return
        run = trainer.run
        # Positional, in MetricsCollector.log's order: this runs for every self.log call.
        run.metrics.log(
            run.flow.machine_state,
            fx,
            name,
            value,
            prog_bar,
            True if logger is None else logger,
            on_step,
            on_epoch,
            reduce_fx,
            enable_graph,
            add_dataloader_idx,
            batch_size,
            sync_dist,
            sync_dist_group,
            rank_zero_only,
        )

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        for name, value in dictionary.items():
            self.log(
                name,
                value,
                prog_bar=prog_bar,
                logger=logger,
                on_step=on_step,
                on_epoch=on_epoch,
                reduce_fx=reduce_fx,
                enable_graph=enable_graph,
                add_dataloader_idx=add_dataloader_idx,
                batch_size=batch_size,
                sync_dist=sync_dist,
                sync_dist_group=sync_dist_group,
                rank_zero_only=rank_zero_only,
            )

    def all_gather(self, data: Any, group: Any | None = None, sync_grads: bool = False) -> Any:
        """Every rank's `data` (tensors and numbers, nested in any container a batch may be), each tensor stacked
        along a new first dimension indexed by rank; with one process the data comes back as tensors unchanged."""
        strategy = self.trainer.strategy

        def gather(item: Tensor | int | float) -> Any:
            if isinstance(item, bool):
                return item
            tensor = item if isinstance(item, Tensor) else torch.tensor(item, device=self.device)
            return strategy.all_gather(tensor, group=group, sync_grads=sync_grads)

        return map_leaves(data, (Tensor, int, float), gather)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print on global rank 0 only; through the progress bar when one is enabled, so it is not broken."""
        trainer = self._trainer
        if trainer is not None and not trainer.is_global_zero:
            return
        bar = None if trainer is None else trainer.progress_bar_callback
        if bar is not None and bar.is_enabled:
            bar.print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    # ---- optimization ------------------------------------------------------------------------------------------------

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        wrapped = self.trainer.lightning_optimizers
        optimizers = wrapped if use_pl_optimizer else [w.optimizer for w in wrapped]
        return optimizers[0] if len(optimizers) == 1 else optimizers

    def lr_schedulers(self) -> Any:
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        if self.automatic_optimization:
            raise MisconfigurationException("manual_backward is for manual optimization (automatic_optimization=False)")
        self.trainer.run.optimization.run_backward(loss, *args, **kwargs)

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """Backpropagate; by default through the strategy, whose precision may scale the loss first."""
        self.trainer.strategy.backward(loss, *args, **kwargs)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only `optimizer`'s parameters keep requires_grad; the others are frozen until untoggle."""
        target = getattr(optimizer, "optimizer", optimizer)
        own = {id(p) for group in target.param_groups for p in group["params"]}
        self._toggled_requires_grad: dict[int, tuple[nn.Parameter, bool]] = {}
        for opt in self.trainer.optimizers:
            for group in opt.param_groups:
                for param in group["params"]:
                    if id(param) not in own and id(param) not in self._toggled_requires_grad:
                        self._toggled_requires_grad[id(param)] = (param, param.requires_grad)
                        param.requires_grad = False

    def untoggle_optimizer(self, optimizer: Any) -> None:
        for param, requires_grad in getattr(self, "_toggled_requires_grad", {}).values():
            param.requires_grad = requires_grad
        self._toggled_requires_grad = {}

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Generator[None, None, None]:
        """`toggle_optimizer` for the block, `untoggle_optimizer` after it, also when it raises."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Optimizer) -> None:
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_gradient_clipping(
        self,
        optimizer: Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def clip_gradients(
        self,
        optimizer: Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        trainer = self.trainer
        if gradient_clip_val is not None and trainer.gradient_clip_val is not None:
            if gradient_clip_val != trainer.gradient_clip_val:
                raise MisconfigurationException(
                    f"clip_gradients got gradient_clip_val={gradient_clip_val!r} but the Trainer was given "
                    f"{trainer.gradient_clip_val!r}; set it in one place"
                )
        if gradient_clip_algorithm is not None and trainer.gradient_clip_algorithm is not None:
            if gradient_clip_algorithm != trainer.gradient_clip_algorithm:
                raise MisconfigurationException(
                    f"clip_gradients got gradient_clip_algorithm={gradient_clip_algorithm!r} but the Trainer was "
                    f"given {trainer.gradient_clip_algorithm!r}; set it in one place"
                )
        value = gradient_clip_val if gradient_clip_val is not None else (trainer.gradient_clip_val or 0.0)
        algorithm = gradient_clip_algorithm or trainer.gradient_clip_algorithm or "norm"
        if algorithm not in ("norm", "value"):
            raise MisconfigurationException(f"gradient_clip_algorithm={algorithm!r} must be 'norm' or 'value'")
        trainer.strategy.precision.clip_gradients(optimizer, value, algorithm)

    def configure_optimizers(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement configure_optimizers() to be fit")

    def configure_callbacks(self) -> Any:
        return []

    def configure_model(self) -> None:
        """Create modules lazily, after setup (override it; called only when overridden)."""

    # ---- steps -------------------------------------------------------------------------------------------------------

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement training_step() to be fit")

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement validation_step() to validate")

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement test_step() to test")

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        batch = kwargs.get("batch", args[0] if args else None)
        return self(batch)

    # ---- mode hooks: eval before evaluation, train mode restored after -----------------------------------------------

    def on_validation_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_validation_model_train(self) -> None:
        self._restore_modes()

    def on_validation_model_zero_grad(self) -> None:
        self.zero_grad()

    def on_test_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_test_model_train(self) -> None:
        self._restore_modes()

    def on_predict_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_predict_model_train(self) -> None:
        self._restore_modes()

    def _record_modes(self) -> None:
        self._modes_before_eval = {name: m.training for name, m in self.named_modules()}

    def _restore_modes(self) -> None:
        for name, module in self.named_modules():
            if name in self._modes_before_eval:
                module.training = self._modes_before_eval[name]

    # ---- loop hooks (each does nothing by default; override the ones you need) ---------------------------------------

    def on_fit_start(self) -> None:
        """Called when fit begins, after setup and the checkpoint restore."""

    def on_fit_end(self) -> None:
        """Called when fit ends."""

    def on_train_start(self) -> None:
        """Called when training begins, after the sanity check."""

    def on_train_end(self) -> None:
        """Called when training ends."""

    def on_train_epoch_start(self) -> None:
        """Called at the start of each training epoch."""

    def on_train_epoch_end(self) -> None:
        """Called at the end of each training epoch."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Called before each training batch; return -1 to end the epoch early."""
        return None

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Called after each training batch."""

    def on_validation_start(self) -> None:
        """Called when a validation run begins."""

    def on_validation_end(self) -> None:
        """Called when a validation run ends."""

    def on_validation_epoch_start(self) -> None:
        """Called at the start of a validation epoch."""

    def on_validation_epoch_end(self) -> None:
        """Called at the end of a validation epoch."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called before each validation batch."""

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each validation batch."""

    def on_test_start(self) -> None:
        """Called when a test run begins."""

    def on_test_end(self) -> None:
        """Called when a test run ends."""

    def on_test_epoch_start(self) -> None:
        """Called at the start of a test epoch."""

    def on_test_epoch_end(self) -> None:
        """Called at the end of a test epoch."""

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called before each test batch."""

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each test batch."""

    def on_predict_start(self) -> None:
        """Called when a predict run begins."""

    def on_predict_end(self) -> None:
        """Called when a predict run ends."""

    def on_predict_epoch_start(self) -> None:
        """Called at the start of a predict epoch."""

    def on_predict_epoch_end(self) -> None:
        """Called at the end of a predict epoch."""

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called before each predict batch."""

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each predict batch."""

    def on_before_backward(self, loss: Tensor) -> None:
        """Called before `loss.backward()`."""

    def on_after_backward(self) -> None:
        """Called after `loss.backward()`, before the optimizer step."""

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        """Called after gradients are ready and before the step."""

    def on_before_zero_grad(self, optimizer: Optimizer) -> None:
        """Called before the gradients are zeroed."""

    # ---- checkpoint hooks --------------------------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add keys to a checkpoint being saved (override it)."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read keys from a checkpoint being restored (override it)."""

    @class_only
    def load_from_checkpoint(
        cls: Any,
        checkpoint_path: str | os.PathLike[str],
        map_location: Any = None,
        hparams_file: str | os.PathLike[str] | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Build the module from a checkpoint and load its weights.

        The constructor gets the checkpoint's saved hyperparameters (an OmegaConf config as one again), replaced
        by those in `hparams_file` (a `hparams.yaml` or tags `.csv`) when given, and overridden by `kwargs`;
        `__init__` gets only the names it takes unless it takes `**kwargs`. `map_location` is torch.load's (by
        default a storage stays on its device when this host has it, else comes to the CPU); the module is
        returned on the device its loaded weights are on. `strict` defaults to the module's `strict_loading`
        and must agree with it when both are set. `weights_only` (unset: True, torch's default) unpickles only
        tensors and plain values; a checkpoint holding an OmegaConf config needs `weights_only=False`.
        """
        return saving.load_from_checkpoint(
            cls, checkpoint_path, map_location, hparams_file, strict, weights_only, **kwargs
        )

    # ---- export ------------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def to_torchscript(
        self,
        file_path: str | os.PathLike[str] | None = None,
        method: str = "script",
        example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The module compiled by TorchScript (`method="script"`) or traced (`"trace"`, on `example_inputs` or
        `example_input_array`), in eval mode; saved to `file_path` when given. The module's mode is restored."""
        if method not in ("script", "trace"):
            raise ValueError(f"to_torchscript method={method!r} must be 'script' or 'trace'")
        training = self.training
        try:
            with tracing(self):
                if method == "script":
                    compiled = torch.jit.script(self.eval(), **kwargs)
                else:
                    inputs = self.example_input_array if example_inputs is None else example_inputs
                    if inputs is None:
                        raise ValueError(
                            "to_torchscript(method='trace') needs example_inputs or the module's example_input_array"
                        )
                    inputs = move_to_device(inputs, self.device)
                    compiled = torch.jit.trace(self.eval(), example_inputs=inputs, **kwargs)
        finally:
            self.train(training)
        if file_path is not None:
            torch.jit.save(compiled, os.fspath(file_path))
        return compiled

    @torch.no_grad()
    def to_onnx(self, file_path: str | os.PathLike[str] | Any, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX with `torch.onnx.export`, on `input_sample` or `example_input_array` (needs the `onnx`
        package: `pip install statemachine-trainer[onnx]`)."""
        try:
            import onnx  # noqa: F401
        except ImportError as missing:
            raise ModuleNotFoundError(
                f"{type(self).__name__}.to_onnx() needs the onnx package: pip install statemachine-trainer[onnx]"
            ) from missing
        inputs = self.example_input_array if input_sample is None else input_sample
        if inputs is None:
            raise ValueError("to_onnx needs input_sample or the module's example_input_array")
        inputs = move_to_device(inputs, self.device)
        args = inputs if isinstance(inputs, tuple) else (inputs,)
        training = self.training
        try:
            return torch.onnx.export(self.eval(), args, file_path, **kwargs)
        finally:
            self.train(training)

    def freeze(self) -> None:
        for param in self.parameters():
            param.requires_grad = False
        self.eval()

    def unfreeze(self) -> None:
        for param in self.parameters():
            param.requires_grad = True
        self.train()


# Hooks whose default does nothing: the hook runner skips them when the module does not override them.
NO_OP_HOOKS = frozenset(
    (
        "on_fit_start",
        "on_fit_end",
        "on_train_start",
        "on_train_end",
        "on_train_epoch_start",
        "on_train_epoch_end",
        "on_validation_start",
        "on_validation_end",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_test_start",
        "on_test_end",
        "on_test_epoch_start",
        "on_test_epoch_end",
        "on_predict_start",
        "on_predict_end",
        "on_predict_epoch_start",
        "on_predict_epoch_end",
        "on_after_backward",
        "on_validation_batch_start",
        "on_validation_batch_end",
        "on_test_batch_start",
        "on_test_batch_end",
        "on_predict_batch_start",
        "on_predict_batch_end",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_before_backward",
        "on_before_optimizer_step",
        "on_before_zero_grad",
        "configure_model",
        "prepare_data",
        "setup",
        "teardown",
        "on_save_checkpoint",
        "on_load_checkpoint",
    )
)


@contextlib.contextmanager
def tracing(model: LightningModule) -> Iterator[None]:
    """Mark every LightningModule inside `model` as being traced, so their trainer-bound properties stay quiet."""
    marked = [module for module in model.modules() if isinstance(module, LightningModule)]
    for module in marked:
        module.__dict__["_jit_is_scripting"] = True
    try:
        yield
    finally:
        for module in marked:
            del module.__dict__["_jit_is_scripting"]
