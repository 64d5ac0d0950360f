"""Recording doubles for the hook-order tests: a LightningModule, a Callback and a DataModule that append every
hook they enter to one shared list, then defer to the base implementation.

Entries are the hook name (`Callback.`/`DataModule.` prefixed for those owners), with a few key arguments in
parentheses: the stage of `setup`/`teardown`, the `batch_idx` of batch hooks and steps, `(epoch, batch_idx)` of
`optimizer_step`/`optimizer_zero_grad` and the clipping arguments. The entry is appended on ENTRY, before the
base implementation runs, so nested hooks follow their caller.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.utils.data import DataLoader

import statemachine as L
from statemachine.engine.enums import TrainerFn


def _entry(name: str, *details: Any) -> str:
    return f"{name}({', '.join(str(d) for d in details)})" if details else name


def _stage(stage: Any) -> str:
    """The stage as recorded: its value when it is a TrainerFn, its repr otherwise."""
    return stage.value if isinstance(stage, TrainerFn) else repr(stage)


def loader(num_batches: int = 8) -> DataLoader:
    """`num_batches` batches of 2 random 32-feature rows."""
    return DataLoader(torch.randn(2 * num_batches, 32), batch_size=2)


class HookedModel(L.LightningModule):
    """BoringModel-like (Linear(32, 2), SGD + StepLR) that records every LightningModule hook it enters."""

    def __init__(self, called: list[str]) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)
        self.called = called
        self.train_batch_end_outputs: list[dict[str, Any]] = []
        self.training_losses: list[Tensor] = []
        self.saved_checkpoints: list[dict[str, Any]] = []
        self.loaded_checkpoints: list[dict[str, Any]] = []

    def _record(self, name: str, *details: Any) -> None:
        self.called.append(_entry(name, *details))

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def loss(self, batch: Tensor) -> Tensor:
        out = self(batch)
        return nn.functional.mse_loss(out, torch.ones_like(out))

    # ---- configuration ----

    def configure_callbacks(self) -> Any:
        self._record("configure_callbacks")
        return super().configure_callbacks()

    def configure_model(self) -> None:
        self._record("configure_model")
        super().configure_model()

    def configure_optimizers(self) -> Any:
        self._record("configure_optimizers")
        optimizer = torch.optim.SGD(self.layer.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    # ---- data ----

    def prepare_data(self) -> None:
        self._record("prepare_data")
        super().prepare_data()

    def setup(self, stage: str) -> None:
        self._record("setup", _stage(stage))
        super().setup(stage)

    def teardown(self, stage: str) -> None:
        self._record("teardown", _stage(stage))
        super().teardown(stage)

    def train_dataloader(self) -> Any:
        self._record("train_dataloader")
        return loader()

    def val_dataloader(self) -> Any:
        self._record("val_dataloader")
        return loader()

    def test_dataloader(self) -> Any:
        self._record("test_dataloader")
        return loader()

    def predict_dataloader(self) -> Any:
        self._record("predict_dataloader")
        return loader()

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self._record("on_before_batch_transfer")
        return super().on_before_batch_transfer(batch, dataloader_idx)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self._record("transfer_batch_to_device")
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self._record("on_after_batch_transfer")
        return super().on_after_batch_transfer(batch, dataloader_idx)

    # ---- fit ----

    def on_fit_start(self) -> None:
        self._record("on_fit_start")
        super().on_fit_start()

    def on_fit_end(self) -> None:
        self._record("on_fit_end")
        super().on_fit_end()

    def on_train_start(self) -> None:
        self._record("on_train_start")
        super().on_train_start()

    def on_train_end(self) -> None:
        self._record("on_train_end")
        super().on_train_end()

    def on_train_epoch_start(self) -> None:
        self._record("on_train_epoch_start")
        super().on_train_epoch_start()

    def on_train_epoch_end(self) -> None:
        self._record("on_train_epoch_end")
        super().on_train_epoch_end()

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        self._record("on_train_batch_start", batch_idx)
        return super().on_train_batch_start(batch, batch_idx)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._record("on_train_batch_end", batch_idx)
        self.train_batch_end_outputs.append(outputs)
        super().on_train_batch_end(outputs, batch, batch_idx)

    def training_step(self, batch: Tensor, batch_idx: int) -> Any:
        self._record("training_step", batch_idx)
        loss = self.loss(batch)
        self.training_losses.append(loss.detach())
        return {"loss": loss}

    # ---- optimization ----

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self._record("optimizer_step", epoch, batch_idx)
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def on_before_zero_grad(self, optimizer: Optimizer) -> None:
        self._record("on_before_zero_grad")
        super().on_before_zero_grad(optimizer)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Optimizer) -> None:
        self._record("optimizer_zero_grad", epoch, batch_idx)
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def on_before_backward(self, loss: Tensor) -> None:
        self._record("on_before_backward")
        super().on_before_backward(loss)

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        self._record("backward")
        super().backward(loss, *args, **kwargs)

    def manual_backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        self._record("manual_backward")
        super().manual_backward(loss, *args, **kwargs)

    def on_after_backward(self) -> None:
        self._record("on_after_backward")
        super().on_after_backward()

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        self._record("on_before_optimizer_step")
        super().on_before_optimizer_step(optimizer)

    def configure_gradient_clipping(
        self,
        optimizer: Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        self._record("configure_gradient_clipping", gradient_clip_val, gradient_clip_algorithm)
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def clip_gradients(
        self,
        optimizer: Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        self._record("clip_gradients", gradient_clip_val, gradient_clip_algorithm)
        super().clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self._record("lr_scheduler_step", metric)
        super().lr_scheduler_step(scheduler, metric)

    # ---- validation ----

    def on_validation_model_zero_grad(self) -> None:
        self._record("on_validation_model_zero_grad")
        super().on_validation_model_zero_grad()

    def on_validation_model_eval(self) -> None:
        self._record("on_validation_model_eval")
        super().on_validation_model_eval()

    def on_validation_model_train(self) -> None:
        self._record("on_validation_model_train")
        super().on_validation_model_train()

    def on_validation_start(self) -> None:
        self._record("on_validation_start")
        super().on_validation_start()

    def on_validation_end(self) -> None:
        self._record("on_validation_end")
        super().on_validation_end()

    def on_validation_epoch_start(self) -> None:
        self._record("on_validation_epoch_start")
        super().on_validation_epoch_start()

    def on_validation_epoch_end(self) -> None:
        self._record("on_validation_epoch_end")
        super().on_validation_epoch_end()

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._record("on_validation_batch_start", batch_idx)
        super().on_validation_batch_start(batch, batch_idx, dataloader_idx)

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._record("on_validation_batch_end", batch_idx)
        super().on_validation_batch_end(outputs, batch, batch_idx, dataloader_idx)

    def validation_step(self, batch: Tensor, batch_idx: int) -> Any:
        self._record("validation_step", batch_idx)
        return {"x": self.loss(batch)}

    # ---- test ----

    def on_test_model_eval(self) -> None:
        self._record("on_test_model_eval")
        super().on_test_model_eval()

    def on_test_model_train(self) -> None:
        self._record("on_test_model_train")
        super().on_test_model_train()

    def on_test_start(self) -> None:
        self._record("on_test_start")
        super().on_test_start()

    def on_test_end(self) -> None:
        self._record("on_test_end")
        super().on_test_end()

    def on_test_epoch_start(self) -> None:
        self._record("on_test_epoch_start")
        super().on_test_epoch_start()

    def on_test_epoch_end(self) -> None:
        self._record("on_test_epoch_end")
        super().on_test_epoch_end()

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._record("on_test_batch_start", batch_idx)
        super().on_test_batch_start(batch, batch_idx, dataloader_idx)

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._record("on_test_batch_end", batch_idx)
        super().on_test_batch_end(outputs, batch, batch_idx, dataloader_idx)

    def test_step(self, batch: Tensor, batch_idx: int) -> Any:
        self._record("test_step", batch_idx)
        return {"y": self.loss(batch)}

    # ---- predict ----

    def on_predict_model_eval(self) -> None:
        self._record("on_predict_model_eval")
        super().on_predict_model_eval()

    def on_predict_model_train(self) -> None:
        self._record("on_predict_model_train")
        super().on_predict_model_train()

    def on_predict_start(self) -> None:
        self._record("on_predict_start")
        super().on_predict_start()

    def on_predict_end(self) -> None:
        self._record("on_predict_end")
        super().on_predict_end()

    def on_predict_epoch_start(self) -> None:
        self._record("on_predict_epoch_start")
        super().on_predict_epoch_start()

    def on_predict_epoch_end(self) -> None:
        self._record("on_predict_epoch_end")
        super().on_predict_epoch_end()

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._record("on_predict_batch_start", batch_idx)
        super().on_predict_batch_start(batch, batch_idx, dataloader_idx)

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._record("on_predict_batch_end", batch_idx)
        super().on_predict_batch_end(outputs, batch, batch_idx, dataloader_idx)

    def predict_step(self, batch: Tensor, batch_idx: int) -> Any:
        self._record("predict_step", batch_idx)
        return super().predict_step(batch, batch_idx)

    # ---- checkpoints ----

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._record("on_save_checkpoint")
        self.saved_checkpoints.append(dict(checkpoint))
        super().on_save_checkpoint(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._record("on_load_checkpoint")
        self.loaded_checkpoints.append(checkpoint)
        super().on_load_checkpoint(checkpoint)


class ManualHookedModel(HookedModel):
    """Manual optimization: `training_step` zeroes, calls `manual_backward` and steps with a closure."""

    def __init__(self, called: list[str]) -> None:
        super().__init__(called)
        self.automatic_optimization = False

    def training_step(self, batch: Tensor, batch_idx: int) -> Any:
        self._record("training_step", batch_idx)
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss = self.loss(batch)
        self.manual_backward(loss)
        optimizer.step(lambda: self._record("closure"))
        return {"loss": loss}


class RecordingCallback(L.Callback):
    """Records every Callback hook as `<label>.<hook>`; its state is non-empty so it is saved and restored."""

    def __init__(self, called: list[str], label: str = "Callback") -> None:
        self.called = called
        self.label = label

    def _record(self, name: str, *details: Any) -> None:
        self.called.append(_entry(f"{self.label}.{name}", *details))

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._record("setup", _stage(stage))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._record("teardown", _stage(stage))

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_fit_start")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_fit_end")

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_sanity_check_start")

    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_sanity_check_end")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_train_start")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_train_end")

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_train_epoch_start")

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_train_epoch_end")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._record("on_train_batch_start", batch_idx)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._record("on_train_batch_end", batch_idx)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_validation_start")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_validation_end")

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_validation_epoch_start")

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_validation_epoch_end")

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._record("on_validation_batch_start", batch_idx)

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._record("on_validation_batch_end", batch_idx)

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_test_start")

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_test_end")

    def on_test_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_test_epoch_start")

    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_test_epoch_end")

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._record("on_test_batch_start", batch_idx)

    def on_test_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._record("on_test_batch_end", batch_idx)

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_predict_start")

    def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_predict_end")

    def on_predict_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_predict_epoch_start")

    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_predict_epoch_end")

    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._record("on_predict_batch_start", batch_idx)

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._record("on_predict_batch_end", batch_idx)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._record("on_exception")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._record("on_before_backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._record("on_after_backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Optimizer) -> None:
        self._record("on_before_optimizer_step")

    def on_before_zero_grad(self, trainer: Any, pl_module: Any, optimizer: Optimizer) -> None:
        self._record("on_before_zero_grad")

    def state_dict(self) -> dict[str, Any]:
        self._record("state_dict")
        return {"label": self.label}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._record("load_state_dict")

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._record("on_save_checkpoint")

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._record("on_load_checkpoint")


class HookedDataModule(L.LightningDataModule):
    """Records the DataModule hooks as `DataModule.<hook>`.

    The batch-transfer hooks are left to the module: a DataModule override would replace the module's.
    """

    def __init__(self, called: list[str]) -> None:
        super().__init__()
        self.called = called

    def _record(self, name: str, *details: Any) -> None:
        self.called.append(_entry(f"DataModule.{name}", *details))

    def prepare_data(self) -> None:
        self._record("prepare_data")
        super().prepare_data()

    def setup(self, stage: str) -> None:
        self._record("setup", _stage(stage))
        super().setup(stage)

    def teardown(self, stage: str) -> None:
        self._record("teardown", _stage(stage))
        super().teardown(stage)

    def train_dataloader(self) -> Any:
        self._record("train_dataloader")
        return loader()

    def val_dataloader(self) -> Any:
        self._record("val_dataloader")
        return loader()

    def test_dataloader(self) -> Any:
        self._record("test_dataloader")
        return loader()

    def predict_dataloader(self) -> Any:
        self._record("predict_dataloader")
        return loader()

    def state_dict(self) -> dict[str, Any]:
        self._record("state_dict")
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._record("load_state_dict")
        super().load_state_dict(state_dict)

    def on_exception(self, exception: BaseException) -> None:
        self._record("on_exception")
        super().on_exception(exception)
