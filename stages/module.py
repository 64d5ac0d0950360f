"""LightningModule: the user's model, with Lightning's hooks and helpers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from stages.exceptions import MisconfigurationException
from stages.hparams import HyperparametersMixin


class LightningModule(HyperparametersMixin, nn.Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: Any = None
        self._current_fx_name: str | None = None
        self._init_hparams()
        self._modes_before_eval: dict[str, bool] = {}
        self.automatic_optimization = True
        self.strict_loading = True
        self.prepare_data_per_node = True
        self.example_input_array: Any = None

    # ---- trainer views ----------------------------------------------------------------------------------

    @property
    def trainer(self) -> Any:
        if self._trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer")
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: Any) -> None:
        self._trainer = trainer

    @property
    def device(self) -> torch.device:
        for tensor in self.parameters():
            return tensor.device
        for tensor in self.buffers():
            return tensor.device
        return torch.device("cpu")

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
    def logger(self) -> Any:
        return None if self._trainer is None else self._trainer.logger

    @property
    def loggers(self) -> list[Any]:
        return [] if self._trainer is None else self._trainer.loggers

    # ---- logging ----------------------------------------------------------------------------------------

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
        if self._trainer is None:
            return
        if self._current_fx_name is None:
            raise MisconfigurationException(
                f"self.log({name!r}, ...) was called outside the Trainer's control flow; call it from a hook"
            )
        self._trainer._metrics.log(
            self._current_fx_name,
            name,
            value,
            prog_bar=prog_bar,
            logger=True if logger is None else logger,
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
        """Every rank's `data` (tensors and numbers, nested in dicts, lists and tuples), each tensor stacked
        along a new first dimension indexed by rank; with one process the data comes back as tensors unchanged."""
        strategy = self.trainer.strategy

        def gather(item: Any) -> Any:
            if isinstance(item, Mapping):
                return type(item)({key: gather(value) for key, value in item.items()})
            if isinstance(item, list | tuple):
                return type(item)(gather(value) for value in item)
            if isinstance(item, Tensor | int | float) and not isinstance(item, bool):
                tensor = item if isinstance(item, Tensor) else torch.tensor(item, device=self.device)
                return strategy.all_gather(tensor, group=group, sync_grads=sync_grads)
            return item

        return gather(data)

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self._trainer is None or self._trainer.is_global_zero:
            print(*args, **kwargs)

    # ---- optimization -----------------------------------------------------------------------------------

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        wrapped = self.trainer._optimization.lightning_optimizers
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
        self.trainer._optimization.run_backward(loss, *args, **kwargs)

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """Backpropagate; by default through the strategy, whose precision may scale the loss first."""
        self.trainer.strategy.backward(loss, *args, **kwargs)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only `optimizer`'s parameters keep requires_grad; the others are frozen until untoggle."""
        target = getattr(optimizer, "optimizer", optimizer)
        own = {id(p) for group in target.param_groups for p in group["params"]}
        self._toggled_requires_grad = {}
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
        if value <= 0:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, value)
        else:
            torch.nn.utils.clip_grad_norm_(params, value)

    def configure_optimizers(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement configure_optimizers() to be fit")

    def configure_callbacks(self) -> Any:
        return []

    def configure_model(self) -> None:
        """Create modules lazily, after setup (override it; called only when overridden)."""

    # ---- steps ------------------------------------------------------------------------------------------

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement training_step() to be fit")

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement validation_step() to validate")

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        raise MisconfigurationException(f"{type(self).__name__} must implement test_step() to test")

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        batch = kwargs.get("batch", args[0] if args else None)
        return self(batch)

    # ---- data hooks -------------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download or write data once per node (override it)."""

    def setup(self, stage: str) -> None:
        """Build what depends on the stage (override it)."""

    def teardown(self, stage: str) -> None:
        """Release what setup built (override it)."""

    def train_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.train_dataloader() is not implemented")

    def val_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.val_dataloader() is not implemented")

    def test_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.test_dataloader() is not implemented")

    def predict_dataloader(self) -> Any:
        raise MisconfigurationException(f"{type(self).__name__}.predict_dataloader() is not implemented")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return self.trainer.strategy.batch_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    # ---- mode hooks (reference 4 and 9.3) ---------------------------------------------------------------

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

    # ---- checkpoint hooks -------------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add keys to a checkpoint being saved (override it)."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read keys from a checkpoint being restored (override it)."""

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: str, map_location: Any = None, strict: bool | None = None, **kwargs: Any
    ) -> LightningModule:
        """Build the module from the checkpoint's hyperparameters (overridden by `kwargs`) and load its weights."""
        from devices.checkpoint_io import load_checkpoint

        checkpoint = load_checkpoint(checkpoint_path, map_location=map_location or "cpu")
        params = {**checkpoint.get("hyper_parameters", {}), **kwargs}
        model = cls(**params)
        model.on_load_checkpoint(checkpoint)
        model.load_state_dict(checkpoint["state_dict"], strict=model.strict_loading if strict is None else strict)
        return model

    def freeze(self) -> None:
        for param in self.parameters():
            param.requires_grad = False
        self.eval()

    def unfreeze(self) -> None:
        for param in self.parameters():
            param.requires_grad = True
        self.train()


_HOOKS_WITHOUT_BODY = (
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
)
_BATCH_HOOKS = (
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)


def _no_op(self: LightningModule, *args: Any, **kwargs: Any) -> None:
    """A hook the module may override; by default it does nothing."""


def _train_batch_start(self: LightningModule, batch: Any, batch_idx: int) -> int | None:
    """Return -1 to end the epoch early (override it)."""
    return None


def _train_batch_end(self: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
    """Called after each training batch (override it)."""


def _before_backward(self: LightningModule, loss: Tensor) -> None:
    """Called before `loss.backward()` (override it)."""


def _before_optimizer_step(self: LightningModule, optimizer: Optimizer) -> None:
    """Called after gradients are ready and before the step (override it)."""


def _before_zero_grad(self: LightningModule, optimizer: Optimizer) -> None:
    """Called before the gradients are zeroed (override it)."""


# Hooks whose default does nothing: the hook runner skips them when the module does not override them.
NO_OP_HOOKS = frozenset(
    _HOOKS_WITHOUT_BODY
    + _BATCH_HOOKS
    + (
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

for _name in _HOOKS_WITHOUT_BODY + _BATCH_HOOKS:
    setattr(LightningModule, _name, _no_op)
LightningModule.on_train_batch_start = _train_batch_start
LightningModule.on_train_batch_end = _train_batch_end
LightningModule.on_before_backward = _before_backward
LightningModule.on_before_optimizer_step = _before_optimizer_step
LightningModule.on_before_zero_grad = _before_zero_grad
