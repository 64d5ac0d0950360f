"""Where Lightning raises or warns, the trainer does too: the same exception class (or a subclass) and a message that
holds Lightning's words, which users search for; our own detail may follow them."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer
from torch import nn

import statemachine as L
from stages.exceptions import TrainerWarning

# ---- Trainer(...) arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "error", "words"),
    [
        ({"accelerator": "tpu_x"}, ValueError, "You selected an invalid accelerator name: `accelerator='tpu_x'`."),
        ({"devices": 0}, L.MisconfigurationException, "`Trainer(devices=0)` value is not a valid input using cpu"),
        ({"devices": -2}, TypeError, "`devices` selected with `CPUAccelerator` should be an int > 0."),
        ({"devices": "abc"}, TypeError, "`devices` selected with `CPUAccelerator` should be an int > 0."),
        ({"precision": "17"}, ValueError, "Precision '17' is invalid. Allowed precision values:"),
        ({"strategy": "nope"}, ValueError, "You selected an invalid strategy name: `strategy='nope'`."),
        ({"num_nodes": 0}, ValueError, "`num_nodes` must be a positive integer, but got 0."),
        ({"max_epochs": -2}, L.MisconfigurationException, "`max_epochs` must be a non-negative integer or -1. You"),
        ({"max_steps": -2}, L.MisconfigurationException, "`max_steps` must be a non-negative integer or -1 (infinite"),
        ({"val_check_interval": 1.5}, L.MisconfigurationException, "You have passed invalid value 1.5 for val_check"),
        ({"val_check_interval": "x"}, L.MisconfigurationException, "Invalid time format for `val_check_interval`: 'x'"),
        ({"check_val_every_n_epoch": 1.5}, L.MisconfigurationException, "`check_val_every_n_epoch` should be an int"),
        (
            {"check_val_every_n_epoch": None, "val_check_interval": 0.5},
            L.MisconfigurationException,
            "`val_check_interval` should be an integer or a time-based duration",
        ),
        ({"limit_train_batches": -1}, L.MisconfigurationException, "You have passed invalid value -1 for limit_train"),
        ({"limit_val_batches": 1.5}, L.MisconfigurationException, "invalid value 1.5 for limit_val_batches, it has to"),
        ({"limit_test_batches": "a"}, TypeError, "You have passed invalid value a for limit_test_batches"),
        ({"overfit_batches": -1}, L.MisconfigurationException, "You have passed invalid value -1 for overfit_batches"),
        ({"gradient_clip_algorithm": "foo"}, L.MisconfigurationException, "`gradient_clip_algorithm` foo is invalid."),
        ({"gradient_clip_val": "a"}, TypeError, "`gradient_clip_val` should be an int or a float. Got a."),
        ({"fast_dev_run": -1}, L.MisconfigurationException, "fast_dev_run=-1 is not a valid configuration. It should"),
        ({"reload_dataloaders_every_n_epochs": -1}, L.MisconfigurationException, "should be an int >= 0, got -1."),
        ({"reload_dataloaders_every_n_epochs": 1.5}, L.MisconfigurationException, "should be an int >= 0, got 1.5."),
        ({"max_time": "bad"}, L.MisconfigurationException, "`Timer(duration='bad')` is not a valid duration."),
        ({"profiler": "foo"}, L.MisconfigurationException, "When passing string value for the `profiler` parameter"),
    ],
)
def test_a_bad_trainer_argument_raises_lightnings_error(
    tmp_path: Path, flags: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)):
        L.Trainer(default_root_dir=tmp_path, logger=False, **flags)


def test_every_bad_trainer_argument_is_reported_in_one_error_with_lightnings_words(tmp_path: Path) -> None:
    with pytest.raises(L.MisconfigurationException) as raised:
        L.Trainer(default_root_dir=tmp_path, logger=False, max_epochs=-2, fast_dev_run=-1, devices=-2)
    message = str(raised.value)
    assert "`max_epochs` must be a non-negative integer or -1. You passed in -2." in message
    assert "fast_dev_run=-1 is not a valid configuration. It should be >= 0." in message
    assert "`devices` selected with `CPUAccelerator` should be an int > 0." in message
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, TypeError)


# ---- ckpt_path in validate / test / predict ---------------------------------------------------------------------


def _fitted(tmp_path: Path, **flags: Any) -> L.Trainer:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, **flags)
    trainer.fit(TinyModel(), make_loader())
    return trainer


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_best_without_a_model_checkpoint_is_lightnings_value_error(tmp_path: Path, fn: str) -> None:
    trainer = _fitted(tmp_path)
    with pytest.raises(ValueError, match=re.escape(f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not')):
        getattr(trainer, fn)(dataloaders=make_loader(), ckpt_path="best")


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_no_ckpt_path_after_fit_warns_and_then_needs_the_best_checkpoint(tmp_path: Path, fn: str) -> None:
    trainer = _fitted(tmp_path)
    warned = f"`.{fn}(ckpt_path=None)` was called without a model. The best model of the previous `fit` call will be"
    with pytest.warns(TrainerWarning, match=re.escape(warned)):
        with pytest.raises(ValueError, match=re.escape("`ModelCheckpoint` is not configured.")):
            getattr(trainer, fn)(dataloaders=make_loader())


def test_best_from_a_checkpoint_that_saves_no_best_is_refused(tmp_path: Path) -> None:
    checkpoint = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", save_top_k=0)
    trainer = _fitted(tmp_path, enable_checkpointing=True, callbacks=[checkpoint])
    words = '`.test(ckpt_path="best")` is set but `ModelCheckpoint` is not configured to save the best model.'
    with pytest.raises(ValueError, match=re.escape(words)):
        trainer.test(dataloaders=make_loader(), ckpt_path="best")


def test_last_without_a_last_checkpoint_warns_and_loads_nothing(tmp_path: Path) -> None:
    trainer = _fitted(tmp_path, enable_checkpointing=True, callbacks=[L.ModelCheckpoint(dirpath=tmp_path / "c")])
    words = (
        '.validate(ckpt_path="last") is set, but there is no last checkpoint available. No checkpoint will be loaded'
    )
    with pytest.warns(TrainerWarning, match=re.escape(words)):
        results = trainer.validate(dataloaders=make_loader(), ckpt_path="last", verbose=False)
    assert trainer.ckpt_path is None and "val_loss" in results[0]


def test_loading_a_checkpoint_logs_lightnings_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "saved.ckpt")
    _fitted(tmp_path).save_checkpoint(path)
    with caplog.at_level(logging.INFO, logger="statemachine"):
        quiet_trainer(tmp_path).validate(TinyModel(), make_loader(), ckpt_path=path, verbose=False)
        quiet_trainer(tmp_path, limit_train_batches=2, max_epochs=2).fit(TinyModel(), make_loader(), ckpt_path=path)
    lines = [record.getMessage() for record in caplog.records if "checkpoint" in record.getMessage()]
    assert lines == [
        f"Restoring states from the checkpoint path at {path}",
        f"Loaded model weights from the checkpoint at {path}",
        f"Restoring states from the checkpoint path at {path}",
        f"Restored all states from the checkpoint at {path}",
    ]


def test_a_missing_checkpoint_file_is_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="Checkpoint file not found"):
        quiet_trainer(tmp_path).validate(TinyModel(), make_loader(), ckpt_path=tmp_path / "nope.ckpt")


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_no_model_and_none_before_is_lightnings_type_error(tmp_path: Path, fn: str) -> None:
    words = f"`Trainer.{fn}()` requires a `LightningModule` when it hasn't been passed in a previous run"
    with pytest.raises(TypeError, match=re.escape(words)):
        getattr(quiet_trainer(tmp_path), fn)(dataloaders=make_loader())


# ---- loaders ----------------------------------------------------------------------------------------------------


class ReturnsFromHooks(TinyModel):
    """Its `*_dataloader` hooks return `returned`."""

    def __init__(self, returned: Any) -> None:
        super().__init__()
        self.returned = returned

    def train_dataloader(self) -> Any:
        return self.returned

    def val_dataloader(self) -> Any:
        return self.returned

    def test_dataloader(self) -> Any:
        return self.returned

    def predict_dataloader(self) -> Any:
        return self.returned


@pytest.mark.parametrize("fn", ["fit", "validate", "test", "predict"])
@pytest.mark.parametrize("returned", [None, 5])
def test_a_hook_returning_no_loader_is_lightnings_type_error(tmp_path: Path, fn: str, returned: Any) -> None:
    kind = {"fit": "train", "validate": "val"}.get(fn, fn)
    words = f"An invalid dataloader was returned from `ReturnsFromHooks.{kind}_dataloader()`. Found {returned}."
    # fit is given its val loader: the training hook is the one under test
    loaders = {"val_dataloaders": make_loader()} if fn == "fit" else {}
    with pytest.raises(TypeError, match=re.escape(words)):
        getattr(quiet_trainer(tmp_path), fn)(ReturnsFromHooks(returned), **loaders)


def test_a_val_hook_returning_none_during_fit_is_refused_as_in_lightning(tmp_path: Path) -> None:
    class NoVal(TinyModel):
        def val_dataloader(self) -> Any:
            return None

    with pytest.raises(TypeError, match=re.escape("returned from `NoVal.val_dataloader()`. Found None.")):
        quiet_trainer(tmp_path).fit(NoVal(), make_loader())


def test_a_hook_left_unimplemented_says_it_must_be_implemented(tmp_path: Path) -> None:
    words = "`train_dataloader` must be implemented to be used with the Lightning Trainer"
    with pytest.raises(L.MisconfigurationException, match=re.escape(words)):
        quiet_trainer(tmp_path).fit(TinyModel())


# ---- configure_optimizers ---------------------------------------------------------------------------------------


def _returning(make: Any) -> TinyModel:
    class Configured(TinyModel):
        def configure_optimizers(self) -> Any:
            return make(self, torch.optim.SGD(self.parameters(), lr=0.1))

    return Configured()


def _plateau(optimizer: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)


def _step_lr(optimizer: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.StepLR(optimizer, 1)


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda m, o: 5, L.MisconfigurationException, "Unknown configuration for model optimizers. Output from"),
        (lambda m, o: [5], L.MisconfigurationException, "Unknown configuration for model optimizers."),
        (
            lambda m, o: {"optimizer": o, "lr_scheduler": {"interval": "step"}},
            L.MisconfigurationException,
            'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler',
        ),
        (
            lambda m, o: {"optimizer": o, "lr_scheduler": {"scheduler": _step_lr(o), "interval": "batch"}},
            L.MisconfigurationException,
            'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "batch"',
        ),
        (
            lambda m, o: {"optimizer": o, "lr_scheduler": _plateau(o)},
            L.MisconfigurationException,
            "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used.",
        ),
        (
            lambda m, o: {"optimizer": o, "lr_scheduler": {"scheduler": _plateau(o)}, "monitor": "x"},
            L.MisconfigurationException,
            "The lr scheduler dict must include a monitor when a `ReduceLROnPlateau` scheduler is used.",
        ),
        (
            lambda m, o: {"optimizer": o, "lr_scheduler": _step_lr(torch.optim.SGD(m.parameters(), lr=1.0))},
            L.MisconfigurationException,
            "Some schedulers are attached with an optimizer that wasn't returned from `configure_optimizers`.",
        ),
        (
            lambda m, o: {"optimizer": o, "lr_scheduler": 5},
            TypeError,
            "The provided lr scheduler `int` is invalid. It should have `state_dict` and `load_state_dict`",
        ),
        (
            lambda m, o: [o, torch.optim.SGD(m.parameters(), lr=1.0)],
            RuntimeError,
            "Training with multiple optimizers is only supported with manual optimization.",
        ),
    ],
)
def test_a_bad_configure_optimizers_result_raises_lightnings_error(
    tmp_path: Path, make: Any, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)):
        quiet_trainer(tmp_path, limit_train_batches=1).fit(_returning(make), make_loader())


def test_unsupported_keys_warn_as_in_lightning_and_training_goes_on(tmp_path: Path) -> None:
    model = _returning(lambda m, o: {"optimizer": o, "lr_scheduler": {"scheduler": _step_lr(o), "foo": 1}, "bar": 2})
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, max_epochs=2)
    with pytest.warns(RuntimeWarning) as caught:
        trainer.fit(model, make_loader())
    messages = {str(w.message) for w in caught}
    assert "Found unsupported keys in the optimizer configuration: {'bar'}" in messages
    assert (
        "Found unsupported keys in the lr scheduler dict: {'foo'}. HINT: remove them from the output of "
        "`configure_optimizers`." in messages
    )
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 2  # the scheduler still steps each epoch


# ---- models, checkpoints, self.log, profiler -------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["fit", "validate", "test", "predict"])
def test_a_model_that_is_not_a_lightning_module_is_lightnings_type_error(tmp_path: Path, fn: str) -> None:
    with pytest.raises(TypeError, match=re.escape("`model` must be a `LightningModule`")):
        getattr(quiet_trainer(tmp_path), fn)(nn.Linear(4, 2))


def test_save_checkpoint_before_a_model_is_attached(tmp_path: Path) -> None:
    words = "Saving a checkpoint is only possible if a model is attached to the Trainer."
    with pytest.raises(AttributeError, match=re.escape(words)):
        quiet_trainer(tmp_path).save_checkpoint(tmp_path / "x.ckpt")


class Logs(TinyModel):
    def __init__(self, value: Any, hook: str = "training_step", **options: Any) -> None:
        super().__init__()
        self.value, self.hook, self.options = value, hook, options

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.hook == "training_step":
            self.log("x", self.value, **self.options)
        return super().training_step(batch, batch_idx)

    def on_fit_start(self) -> None:
        if self.hook == "on_fit_start":
            self.log("x", self.value)


@pytest.mark.parametrize(
    ("value", "options", "error", "words"),
    [
        ("abc", {}, ValueError, "`self.log(x, abc)` was called, but `str` values cannot be logged"),
        ({"a": 1.0}, {}, ValueError, "`self.log(x, {'a': 1.0})` was called, but `dict` values cannot be logged"),
        (torch.ones(3), {}, ValueError, "was called, but the tensor must have a single element. You can try doing"),
        (
            1.0,
            {"reduce_fx": "median"},
            L.MisconfigurationException,
            "Only `self.log(..., reduce_fx={min,max,mean,sum})` are supported.",
        ),
    ],
)
def test_self_log_refuses_what_lightning_refuses(
    tmp_path: Path, value: Any, options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)):
        quiet_trainer(tmp_path, limit_train_batches=1).fit(Logs(value, **options), make_loader())


def test_self_log_in_a_hook_lightning_forbids(tmp_path: Path) -> None:
    words = "You can't `self.log()` inside `on_fit_start`. HINT: You can still log directly to the logger"
    with pytest.raises(L.MisconfigurationException, match=re.escape(words)):
        quiet_trainer(tmp_path, limit_train_batches=1).fit(Logs(1.0, hook="on_fit_start"), make_loader())


def test_self_log_takes_a_bool_and_warns_once_about_an_integer_tensor(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=3)
    trainer.fit(Logs(True), make_loader())
    assert trainer.callback_metrics["x"] == 1.0
    words = "You called `self.log('x', ...)` in your `training_step` but the value needs to be floating to be reduced."
    trainer = quiet_trainer(tmp_path, limit_train_batches=3)
    with pytest.warns(TrainerWarning, match=re.escape(words)) as caught:
        trainer.fit(Logs(torch.tensor(3)), make_loader())
    assert len([w for w in caught if "needs to be floating" in str(w.message)]) == 1
    assert trainer.callback_metrics["x"].dtype == torch.float32


@pytest.mark.parametrize("profiler", ["simple", "advanced"])
def test_profiler_summary_after_fit_is_the_fits_report(tmp_path: Path, profiler: str, capsys: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, profiler=profiler)
    trainer.fit(TinyModel(), make_loader())
    summary = trainer.profiler.summary()
    assert summary.startswith("FIT Profiler Report") and "training_step" in summary
    trainer.validate(TinyModel(), make_loader(), verbose=False)
    again = trainer.profiler.summary()
    assert again.startswith("VALIDATE Profiler Report") and "training_step" not in again  # each run its own report
