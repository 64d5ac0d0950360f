"""LightningModule helpers users call directly: toggling optimizers, freezing, seeding, hparams, log guards."""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

import pytest
import torch
from conftest import Boom, TinyModel, make_loader, quiet_trainer
from torch import nn

import statemachine as L
from statemachine.core.optimizer import LightningOptimizer


class TwoOptimizers(L.LightningModule):
    """Manual optimization where each optimizer owns one layer; toggling must freeze the other layer."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 2)
        self.frozen_during_toggle: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opt_a, opt_b = self.optimizers()
        self.toggle_optimizer(opt_a)
        self.frozen_during_toggle.append(not self.second.weight.requires_grad)
        loss = nn.functional.cross_entropy(self.second(self.first(x)), y)
        opt_a.zero_grad()
        opt_b.zero_grad()
        self.manual_backward(loss)
        assert self.second.weight.grad is None  # the frozen layer got no gradient
        opt_a.step()
        self.untoggle_optimizer(opt_a)
        loss = nn.functional.cross_entropy(self.second(self.first(x)), y)
        opt_b.zero_grad()
        self.manual_backward(loss)
        opt_b.step()

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.first.parameters(), lr=0.1), torch.optim.SGD(self.second.parameters(), lr=0.1)]


def test_toggle_optimizer_freezes_the_other_parameters_and_untoggle_restores(tmp_path: Any) -> None:
    model = TwoOptimizers()
    trainer = quiet_trainer(tmp_path, limit_train_batches=3)
    trainer.fit(model, make_loader())
    assert model.frozen_during_toggle == [True, True, True]
    assert all(p.requires_grad for p in model.parameters())
    assert trainer.global_step == 6  # manual optimization counts every optimizer step


def test_manual_backward_is_refused_under_automatic_optimization(tmp_path: Any) -> None:
    class Wrong(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss)
            return loss

    with pytest.raises(L.MisconfigurationException, match="manual optimization"):
        quiet_trainer(tmp_path, limit_train_batches=1).fit(Wrong(), make_loader())


def test_freeze_and_unfreeze() -> None:
    model = TinyModel()
    model.freeze()
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    model.unfreeze()
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_seed_everything_makes_draws_repeatable() -> None:
    assert L.seed_everything(123) == 123
    first = (random.random(), torch.rand(1).item())
    L.seed_everything(123)
    assert (random.random(), torch.rand(1).item()) == first
    with pytest.raises(ValueError, match=r"-1 is not in bounds, numpy accepts from 0 to 4294967295"):
        L.seed_everything(-1)


def test_seed_everything_takes_lightnings_call_forms_and_says_the_seed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)  # both restored after the test
    monkeypatch.delenv("PL_SEED_WORKERS", raising=False)
    with caplog.at_level("INFO"):
        assert L.seed_everything("7", verbose=True) == 7  # a str or float is cast, as Lightning casts it
    assert "Seed set to 7" in caplog.text
    caplog.clear()
    assert L.seed_everything(8.0, verbose=False) == 8 and "Seed set" not in caplog.text
    monkeypatch.delenv("PL_GLOBAL_SEED")
    with pytest.warns(UserWarning, match="No seed found, seed set to 0"):
        assert L.seed_everything() == 0  # Lightning's documented default, not a random seed
    monkeypatch.setenv("PL_GLOBAL_SEED", "31")
    assert L.seed_everything() == 31
    monkeypatch.setenv("PL_GLOBAL_SEED", "x")
    with pytest.raises(ValueError, match="Invalid seed specified via PL_GLOBAL_SEED: 'x'"):
        L.seed_everything()


@pytest.mark.parametrize("verbose", [True, False])
def test_seed_everything_says_the_seed_before_any_trainer_exists(verbose: bool) -> None:
    code = f"import statemachine as L; L.seed_everything(3, verbose={verbose})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert ("Seed set to 3" in done.stderr) is verbose


def test_save_hyperparameters_collects_init_arguments() -> None:
    class Configured(L.LightningModule):
        def __init__(self, width: int = 3, name: str = "x", secret: str = "s") -> None:
            super().__init__()
            self.save_hyperparameters(ignore="secret")

    model = Configured(width=5)
    assert dict(model.hparams) == {"width": 5, "name": "x"}
    assert model.hparams.width == 5


def test_log_outside_the_control_flow_is_refused(tmp_path: Any) -> None:
    model = TinyModel()
    model.log("ignored", 1.0)  # no trainer attached: nothing happens, as in Lightning
    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    trainer.fit(model, make_loader())
    with pytest.raises(L.MisconfigurationException, match="outside the Trainer's control flow"):
        model.log("late", 1.0)


def test_log_after_a_failure_inside_a_paused_epoch_is_refused(tmp_path: Any) -> None:
    """The epoch's batches log as `training_step`; a validation that fails while the epoch waits for it must not
    leave that name behind for a later `self.log` outside any hook."""
    model = TinyModel(fail_in="validation_step")
    trainer = quiet_trainer(tmp_path, limit_train_batches=4, val_check_interval=2, num_sanity_val_steps=0)
    with pytest.raises(Boom):
        trainer.fit(model, make_loader(), make_loader())
    assert trainer.global_step == 2  # it failed in the validation after batch 2, with the epoch paused
    with pytest.raises(L.MisconfigurationException, match="outside the Trainer's control flow"):
        model.log("late", 1.0)


def test_fast_dev_run_swaps_in_a_dummy_logger_that_absorbs_calls(tmp_path: Any) -> None:
    class UsesExperiment(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.logger.experiment.add_scalar("direct", 1.0, batch_idx)
            return super().training_step(batch, batch_idx)

    trainer = L.Trainer(fast_dev_run=True, default_root_dir=str(tmp_path), enable_progress_bar=False)
    trainer.fit(UsesExperiment(), make_loader())
    assert isinstance(trainer.logger, L.DummyLogger)
    assert not (tmp_path / "lightning_logs").exists()


def test_configure_callbacks_replaces_callbacks_of_a_parent_class(tmp_path: Any) -> None:
    class Tuned(L.ModelCheckpoint):
        pass

    class WithCallbacks(TinyModel):
        def configure_callbacks(self) -> Any:
            return [Tuned(dirpath=tmp_path / "tuned")]

    original = L.ModelCheckpoint(dirpath=tmp_path / "original")
    trainer = quiet_trainer(tmp_path, enable_checkpointing=True, callbacks=[original], limit_train_batches=1)
    trainer.fit(WithCallbacks(), make_loader())
    assert [type(c).__name__ for c in trainer.checkpoint_callbacks] == ["Tuned"]


def test_early_stopping_ends_fit_when_the_metric_stops_improving(tmp_path: Any) -> None:
    class Worsening(TinyModel):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", float(self.current_epoch))  # gets worse every epoch

    stopper = L.EarlyStopping(monitor="val_loss", patience=2)
    trainer = quiet_trainer(tmp_path, callbacks=[stopper], max_epochs=20, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(Worsening(), make_loader(), make_loader())
    assert trainer.current_epoch == 3  # best at epoch 0, two epochs without improvement, then stop
    assert stopper.stopped_epoch == 2 and trainer.should_stop
    stop = trainer.history[-1]
    assert (stop.trigger, stop.dest, stop.guards[0].reason) == (
        "epoch_boundary",
        "finished",
        "`trainer.should_stop` was set",
    )


def test_optimizers_stay_reachable_after_fit_as_in_lightning(tmp_path: Any) -> None:
    model = TinyModel()
    trainer = quiet_trainer(tmp_path, max_steps=2)
    trainer.fit(model, make_loader())
    optimizer = model.optimizers()
    assert isinstance(optimizer, LightningOptimizer) and optimizer is model.optimizers()
    assert optimizer.optimizer is trainer.optimizers[0]
    assert model.optimizers(use_pl_optimizer=False) is trainer.optimizers[0]
