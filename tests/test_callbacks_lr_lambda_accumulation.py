"""LearningRateMonitor, LambdaCallback, GradientAccumulationScheduler and OnExceptionCheckpoint through the
real Trainer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import Boom, MemoryLogger, TinyModel, make_loader, quiet_trainer
from torch import nn

import statemachine as L
from stages.exceptions import MisconfigurationException


class ScheduledModel(TinyModel):
    """SGD (lr 0.1) halved by a StepLR every `interval`."""

    def __init__(self, interval: str = "step", name: str | None = None) -> None:
        super().__init__()
        self.interval = interval
        self.scheduler_name = name

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        config = {"scheduler": scheduler, "interval": self.interval}
        if self.scheduler_name is not None:
            config["name"] = self.scheduler_name
        return {"optimizer": optimizer, "lr_scheduler": config}


def _fit(tmp_path: Any, model: L.LightningModule, callback: L.Callback, **options: Any) -> MemoryLogger:
    logger = MemoryLogger()
    trainer = quiet_trainer(tmp_path, logger=logger, log_every_n_steps=1, callbacks=[callback], **options)
    trainer.fit(model, make_loader())
    return logger


# ---- LearningRateMonitor ------------------------------------------------------------------------------------


def test_lr_monitor_logs_a_step_scheduler_every_logging_step(tmp_path: Any) -> None:
    monitor = L.LearningRateMonitor(logging_interval="step")
    logger = _fit(tmp_path, ScheduledModel("step"), monitor)
    # logged before each batch: the lr that batch trains with, at the step count so far
    assert logger.series("lr-SGD") == [(0, 0.1), (1, 0.05), (2, 0.025), (3, 0.0125)]
    assert monitor.lrs == {"lr-SGD": [0.1, 0.05, 0.025, 0.0125]}


def test_lr_monitor_epoch_interval_logs_at_each_epoch_start(tmp_path: Any) -> None:
    monitor = L.LearningRateMonitor(logging_interval="epoch")
    logger = _fit(tmp_path, ScheduledModel("epoch"), monitor, max_epochs=3)
    assert logger.series("lr-SGD") == [(0, 0.1), (4, 0.05), (8, 0.025)]


def test_lr_monitor_default_interval_follows_the_scheduler(tmp_path: Any) -> None:
    logger = _fit(tmp_path, ScheduledModel("epoch"), L.LearningRateMonitor(), max_epochs=2)
    # an epoch scheduler is logged at epoch starts only, not at every step
    assert logger.series("lr-SGD") == [(0, 0.1), (4, 0.05)]


def test_lr_monitor_logs_momentum_and_weight_decay_and_fills_callback_metrics(tmp_path: Any) -> None:
    monitor = L.LearningRateMonitor(logging_interval="epoch", log_momentum=True, log_weight_decay=True)
    logger = MemoryLogger()
    trainer = quiet_trainer(tmp_path, logger=logger, log_every_n_steps=1, callbacks=[monitor])
    trainer.fit(ScheduledModel("epoch", name="my-lr"), make_loader())
    step, metrics = logger.calls[0]
    assert metrics == {"my-lr": 0.1, "my-lr-momentum": 0.9, "my-lr-weight_decay": 0.01}
    assert trainer.callback_metrics["my-lr"].item() == pytest.approx(0.1)
    assert monitor.last_momentum_values == {"my-lr-momentum": 0.9}


class GroupsModel(TinyModel):
    def __init__(self, named: bool) -> None:
        super().__init__()
        self.named = named
        self.extra = nn.Linear(2, 2)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        first: dict[str, Any] = {"params": self.layer.parameters(), "lr": 0.1}
        second: dict[str, Any] = {"params": self.extra.parameters(), "lr": 0.01}
        if self.named:
            first["name"], second["name"] = "head", "tail"
        return torch.optim.Adam([first, second], betas=(0.8, 0.99))


@pytest.mark.parametrize(
    ("named", "keys"), [(False, ["lr-Adam/pg1", "lr-Adam/pg2"]), (True, ["lr-Adam/head", "lr-Adam/tail"])]
)
def test_lr_monitor_names_parameter_groups(tmp_path: Any, named: bool, keys: list[str]) -> None:
    logger = _fit(tmp_path, GroupsModel(named), L.LearningRateMonitor(log_momentum=True))
    _, first = logger.calls[0]
    assert first == {keys[0]: 0.1, f"{keys[0]}-momentum": 0.8, keys[1]: 0.01, f"{keys[1]}-momentum": 0.8}


class TwoOptimizers(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.other = nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        for optimizer in self.optimizers():
            optimizer.zero_grad()
        x, y = batch
        loss = nn.functional.cross_entropy(self.layer(x) + self.other(x), y)
        self.manual_backward(loss)
        for optimizer in self.optimizers():
            optimizer.step()

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.other.parameters(), lr=0.2)]


def test_lr_monitor_counts_optimizers_of_one_class(tmp_path: Any) -> None:
    logger = _fit(tmp_path, TwoOptimizers(), L.LearningRateMonitor())
    assert logger.series("lr-SGD")[0] == (0, 0.1)
    assert logger.series("lr-SGD-1")[0] == (0, 0.2)


def test_lr_monitor_refuses_a_trainer_without_logger(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, callbacks=[L.LearningRateMonitor()])
    with pytest.raises(MisconfigurationException, match="no logger"):
        trainer.fit(TinyModel(), make_loader())


def test_lr_monitor_refuses_a_bad_interval() -> None:
    with pytest.raises(MisconfigurationException, match="'batch'"):
        L.LearningRateMonitor(logging_interval="batch")


def test_lr_monitor_warns_when_no_optimizer_has_momentum(tmp_path: Any) -> None:
    class AdagradModel(TinyModel):
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adagrad(self.parameters(), lr=0.1)

    with pytest.warns(RuntimeWarning, match="momentum"):
        logger = _fit(tmp_path, AdagradModel(), L.LearningRateMonitor(log_momentum=True))
    assert logger.series("lr-Adagrad-momentum")[0] == (0, 0)


# ---- LambdaCallback -----------------------------------------------------------------------------------------


def test_lambda_callback_calls_each_given_hook_with_the_hook_arguments(tmp_path: Any) -> None:
    calls: list[tuple[str, Any]] = []
    callback = L.LambdaCallback(
        on_train_epoch_start=lambda trainer, module: calls.append(("epoch", trainer.current_epoch)),
        on_train_batch_end=lambda trainer, module, outputs, batch, batch_idx: calls.append(("batch", batch_idx)),
        on_fit_end=lambda trainer, module: calls.append(("fit_end", type(module).__name__)),
    )
    quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=2, callbacks=[callback]).fit(TinyModel(), make_loader())
    assert calls == [
        ("epoch", 0),
        ("batch", 0),
        ("batch", 1),
        ("epoch", 1),
        ("batch", 0),
        ("batch", 1),
        ("fit_end", "TinyModel"),
    ]


def test_lambda_callback_on_exception_and_checkpoint_hooks(tmp_path: Any) -> None:
    seen: list[str] = []
    callback = L.LambdaCallback(
        on_save_checkpoint=lambda trainer, module, checkpoint: seen.append("save"),
        on_exception=lambda trainer, module, exception: seen.append(type(exception).__name__),
    )
    trainer = quiet_trainer(tmp_path, callbacks=[callback])
    trainer.fit(TinyModel(), make_loader())
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    with pytest.raises(Boom):
        quiet_trainer(tmp_path, callbacks=[callback]).fit(TinyModel(fail_in="training_step"), make_loader())
    assert seen == ["save", "Boom"]


def test_lambda_callback_refuses_a_non_callable() -> None:
    with pytest.raises(TypeError, match="on_fit_start"):
        L.LambdaCallback(on_fit_start=3)  # type: ignore[arg-type]


def test_a_hook_set_to_none_on_a_callback_instance_is_not_called(tmp_path: Any) -> None:
    class Counting(L.Callback):
        def __init__(self) -> None:
            self.epochs = 0

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self.epochs += 1

    switched_off = Counting()
    switched_off.on_train_epoch_start = None  # type: ignore[assignment]
    quiet_trainer(tmp_path, callbacks=[switched_off]).fit(TinyModel(), make_loader())
    assert switched_off.epochs == 0


# ---- GradientAccumulationScheduler --------------------------------------------------------------------------


class StepCounting(L.Callback):
    def __init__(self) -> None:
        self.factors: list[int] = []
        self.steps_at_epoch_end: list[int] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.factors.append(trainer.accumulate_grad_batches)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.steps_at_epoch_end.append(trainer.global_step)


def test_accumulation_scheduler_sets_the_factor_each_epoch(tmp_path: Any) -> None:
    counter = StepCounting()
    scheduler = L.GradientAccumulationScheduler({1: 2, 2: 4})
    trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[scheduler, counter])
    trainer.fit(TinyModel(), make_loader())  # 4 batches per epoch
    assert counter.factors == [1, 2, 4]
    assert counter.steps_at_epoch_end == [4, 6, 7]
    assert scheduler.get_accumulate_grad_batches(0) == 1
    assert scheduler.get_accumulate_grad_batches(7) == 4


def test_accumulation_scheduler_applies_to_a_fit_resumed_mid_epoch(tmp_path: Any) -> None:
    path = tmp_path / "mid.ckpt"
    save_mid_epoch_1 = L.LambdaCallback(
        on_train_batch_end=lambda t, m, o, b, i: t.save_checkpoint(path) if t.current_epoch == 1 and i == 1 else None
    )
    first = quiet_trainer(tmp_path, max_epochs=2, callbacks=[L.GradientAccumulationScheduler({1: 2}), save_mid_epoch_1])
    first.fit(TinyModel(), make_loader())  # epoch 0: 4 steps; epoch 1: saved after its first step (2 batches)
    counter = StepCounting()
    resumed = quiet_trainer(tmp_path, max_epochs=2, callbacks=[L.GradientAccumulationScheduler({1: 2}), counter])
    resumed.fit(TinyModel(), make_loader(), ckpt_path=tmp_path / "mid.ckpt")
    # the remaining 2 batches of epoch 1 still accumulate 2: one more step
    assert counter.steps_at_epoch_end == [6]


@pytest.mark.parametrize(
    ("scheduling", "error", "match"),
    [
        ({}, TypeError, "non-empty"),
        ({-1: 2}, MisconfigurationException, "epochs"),
        ({"a": 2}, MisconfigurationException, "epochs"),
        ({0: 0}, MisconfigurationException, "factors"),
        ({1: 1.5}, MisconfigurationException, "factors"),
    ],
)
def test_accumulation_scheduler_validates_its_dict(scheduling: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        L.GradientAccumulationScheduler(scheduling)


def test_accumulation_scheduler_conflicts_with_the_trainer_flag(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, accumulate_grad_batches=2, callbacks=[L.GradientAccumulationScheduler({0: 2})])
    with pytest.raises(ValueError, match="accumulate_grad_batches=2"):
        trainer.fit(TinyModel(), make_loader())


def test_accumulation_scheduler_refuses_manual_optimization(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, callbacks=[L.GradientAccumulationScheduler({0: 2})])
    with pytest.raises(RuntimeError, match="automatic optimization"):
        trainer.fit(TwoOptimizers(), make_loader())


# ---- OnExceptionCheckpoint ----------------------------------------------------------------------------------


def test_on_exception_checkpoint_writes_a_resumable_file(tmp_path: Any) -> None:
    callback = L.OnExceptionCheckpoint(dirpath=tmp_path / "ckpts")
    model = TinyModel(fail_in="training_step")
    with pytest.raises(Boom):
        quiet_trainer(tmp_path, enable_checkpointing=True, callbacks=[callback]).fit(model, make_loader())
    path = tmp_path / "ckpts" / "on_exception.ckpt"
    assert callback.ckpt_path == str(path)
    saved = torch.load(path, weights_only=False)
    assert torch.equal(saved["state_dict"]["layer.weight"], model.layer.weight)
    assert saved["global_step"] == 0


def test_on_exception_checkpoint_custom_name_and_no_file_without_failure(tmp_path: Any) -> None:
    callback = L.OnExceptionCheckpoint(dirpath=tmp_path, filename="crash")
    quiet_trainer(tmp_path, enable_checkpointing=True, callbacks=[callback]).fit(TinyModel(), make_loader())
    assert not (tmp_path / "crash.ckpt").exists()
    with pytest.raises(Boom):
        trainer = quiet_trainer(tmp_path, enable_checkpointing=True, callbacks=[callback])
        trainer.fit(TinyModel(fail_in="validation_step"), make_loader(), make_loader())
    assert (tmp_path / "crash.ckpt").exists()
    with pytest.raises(ValueError, match="filename"):
        L.OnExceptionCheckpoint(dirpath=tmp_path, filename="")
