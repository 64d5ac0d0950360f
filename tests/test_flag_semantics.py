"""Trainer flags and resumes whose effects a Lightning user sees: what runs, what the logger is sent, which loaders
are requested when, the counters a resumed fit ends with, and the messages (errors, warnings, console lines).

The expected values were observed under Lightning 2.6.6 running the same scripts.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import REPO, TinyModel, make_loader, quiet_trainer
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

import statemachine as L
from devices.accelerators import CUDAAccelerator
from stages.exceptions import PossibleUserWarning


class CallLogger(L.Logger):
    """Records every call a Logger subclass gets, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    @property
    def name(self) -> str:
        return "calls"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append(("log_metrics", step, tuple(sorted(metrics))))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("log_hyperparams",))

    def save(self) -> None:
        self.calls.append(("save",))

    def finalize(self, status: str) -> None:
        self.calls.append(("finalize", status))

    def steps(self, name: str) -> list[int | None]:
        return [call[1] for call in self.calls if call[0] == "log_metrics" and name in call[2]]


class Stream(IterableDataset):
    """An IterableDataset of `n` batches of 8 samples: a loader over it has no length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        generator = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            x = torch.randn(8, 4, generator=generator)
            yield x, (x[:, 0] > 0).long()


def stream(n: int = 4) -> DataLoader:
    return DataLoader(Stream(n), batch_size=None)


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.INFO]


# ---- 2. max_epochs / max_steps at 0 and -1, and min_epochs / min_steps holding back should_stop ----------------------


class CountingModel(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.train_batches = 0
        self.val_batches = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.train_batches += 1
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_batches += 1
        super().validation_step(batch, batch_idx)


@pytest.mark.parametrize(
    ("flags", "steps", "epochs", "vals", "stopped"),
    [
        ({"max_epochs": 0}, 0, 0, 2, "`Trainer.fit` stopped: `max_epochs=0` reached."),
        ({"max_epochs": None, "max_steps": 0}, 0, 0, 2, "`Trainer.fit` stopped: `max_steps=0` reached."),
        ({"max_epochs": 0, "max_steps": 3}, 0, 0, 2, "`Trainer.fit` stopped: `max_epochs=0` reached."),
        ({"max_epochs": 2, "max_steps": 0}, 0, 0, 2, "`Trainer.fit` stopped: `max_steps=0` reached."),
        # the second epoch stops at its first step, before the end-of-epoch validation
        ({"max_epochs": -1, "max_steps": 5}, 5, 2, 4, "`Trainer.fit` stopped: `max_steps=5` reached."),
        ({"max_epochs": None, "max_steps": 5}, 5, 2, 4, "`Trainer.fit` stopped: `max_steps=5` reached."),
    ],
)
def test_fit_done_at_zero_and_minus_one(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    flags: dict[str, Any],
    steps: int,
    epochs: int,
    vals: int,
    stopped: str,
) -> None:
    model = CountingModel()
    trainer = quiet_trainer(tmp_path, **flags)
    with caplog.at_level(logging.INFO):
        trainer.fit(model, make_loader(), make_loader(16))  # 4 training batches, 2 validation batches
    assert (trainer.global_step, trainer.current_epoch, model.train_batches) == (steps, epochs, steps)
    assert model.val_batches == vals  # the sanity check's 2 batches run even when no epoch does
    assert stopped in info_lines(caplog)
    if flags.get("max_epochs", 1) is None:
        assert trainer.max_epochs == -1  # unlimited: max_steps bounds the run, so there is no 1000-epoch default


class StopEveryBatch(L.Callback):
    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        trainer.should_stop = True


@pytest.mark.parametrize(
    ("flags", "steps", "epochs", "wait"),
    [
        ({"max_epochs": 3, "min_epochs": 2}, 8, 2, "`min_epochs=2` or `min_steps=None`"),
        ({"max_epochs": 5, "min_steps": 6}, 6, 2, "`min_epochs=1` or `min_steps=6`"),
    ],
)
def test_should_stop_waits_for_the_minimums_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, flags: dict[str, Any], steps: int, epochs: int, wait: str
) -> None:
    trainer = quiet_trainer(tmp_path, callbacks=[StopEveryBatch()], **flags)
    with caplog.at_level(logging.INFO):
        trainer.fit(TinyModel(), make_loader(), make_loader(16))
    assert (trainer.global_step, trainer.current_epoch) == (steps, epochs)
    message = f"Trainer was signaled to stop but the required {wait} has not been met. Training will continue..."
    assert info_lines(caplog).count(message) == 1


# ---- 3. fast_dev_run -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runs", [True, 3])
def test_fast_dev_run_keeps_the_checkpoint_callback_and_gives_the_logger_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, runs: int | bool
) -> None:
    logger = CallLogger()
    with caplog.at_level(logging.INFO):
        trainer = L.Trainer(fast_dev_run=runs, logger=logger, enable_progress_bar=False, default_root_dir=str(tmp_path))
    n = int(runs)
    assert (
        f"Running in `fast_dev_run` mode: will run the requested loop using {n} batch(es). Logging and "
        "checkpointing is suppressed." in info_lines(caplog)
    )
    # The user's logger is swapped for a DummyLogger; the default ModelCheckpoint is there, and never saves.
    assert [type(lg).__name__ for lg in trainer.loggers] == ["DummyLogger"]
    assert isinstance(trainer.checkpoint_callback, L.ModelCheckpoint)
    model = CountingModel()
    trainer.fit(model, make_loader(64), make_loader(64))
    assert (model.train_batches, model.val_batches, trainer.global_step) == (n, n, n)
    trainer.validate(model, make_loader(64), verbose=False)
    trainer.test(model, make_loader(64), verbose=False)
    assert len(trainer.predict(model, make_loader(64))) == n
    assert trainer.num_val_batches == [n] and trainer.num_test_batches == [n]
    assert logger.calls == []
    assert not [name for _, _, names in os.walk(tmp_path) for name in names if name.endswith(".ckpt")]
    with pytest.raises(
        ValueError, match=r'You cannot execute `.validate\(ckpt_path="best"\)` with `fast_dev_run=True`'
    ):
        trainer.validate(model, make_loader(64), ckpt_path="best", verbose=False)


# ---- 4. limit_*_batches on loaders without a length, and what 1 means ------------------------------------------------


class NoLength:
    """An iterable of batches that is not a DataLoader and has no length."""

    def __init__(self, n: int = 4) -> None:
        self.loader = make_loader(8 * n)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)


def _run(trainer: L.Trainer, which: str, loader: Any) -> CountingModel:
    model = CountingModel()
    if which == "train":
        trainer.fit(model, loader, make_loader())
    elif which == "val":
        trainer.fit(model, make_loader(), loader)
    elif which == "test":
        trainer.test(model, loader, verbose=False)
    else:
        trainer.predict(model, loader)
    return model


@pytest.mark.parametrize("which", ["train", "val", "test", "predict"])
@pytest.mark.parametrize("source", [stream, NoLength])
def test_a_fraction_of_a_loader_without_length_is_refused_in_lightning_words(
    tmp_path: Path, which: str, source: Any
) -> None:
    trainer = quiet_trainer(tmp_path, num_sanity_val_steps=0, **{f"limit_{which}_batches": 0.5})
    words = (
        f"When using an `IterableDataset`, `Trainer(limit_{which}_batches)` must be `1.0` or an int. An int "
        f"specifies `num_{which}_batches` to use."
    )
    with pytest.raises(L.MisconfigurationException) as raised:
        _run(trainer, which, source())
    assert words in str(raised.value)


@pytest.mark.parametrize("source", [stream, NoLength])
def test_loaders_without_length_take_an_int_limit_and_1_0_runs_them_out(tmp_path: Path, source: Any) -> None:
    model = _run(quiet_trainer(tmp_path, num_sanity_val_steps=0, limit_train_batches=2), "train", source())
    assert model.train_batches == 2
    model = _run(quiet_trainer(tmp_path, num_sanity_val_steps=0, limit_train_batches=1.0), "train", source())
    assert model.train_batches == 4
    trainer = quiet_trainer(tmp_path, limit_test_batches=1)
    assert _run(trainer, "test", source()) is not None and trainer.num_test_batches == [1]


def test_a_fraction_that_gives_no_batch_names_the_least_fraction(tmp_path: Path) -> None:
    with pytest.raises(L.MisconfigurationException) as raised:
        _run(quiet_trainer(tmp_path, limit_val_batches=0.01), "val", make_loader())
    assert (
        "You requested to check 0.01 of the `val_dataloader` but 0.01 * 4 < 1. Please increase the "
        "`limit_val_batches` argument. Try at least `limit_val_batches=0.25`" in str(raised.value)
    )


@pytest.mark.parametrize(
    ("flag", "value", "line"),
    [
        (
            "limit_train_batches",
            1,
            "`Trainer(limit_train_batches=1)` was configured so 1 batch per epoch will be used.",
        ),
        (
            "limit_train_batches",
            1.0,
            "`Trainer(limit_train_batches=1.0)` was configured so 100% of the batches per epoch will be used..",
        ),
        ("limit_val_batches", 1, "`Trainer(limit_val_batches=1)` was configured so 1 batch will be used."),
        (
            "limit_test_batches",
            1.0,
            "`Trainer(limit_test_batches=1.0)` was configured so 100% of the batches will be used..",
        ),
        ("limit_predict_batches", 1, "`Trainer(limit_predict_batches=1)` was configured so 1 batch will be used."),
        ("overfit_batches", 1, "`Trainer(overfit_batches=1)` was configured so 1 batch will be used."),
        (
            "val_check_interval",
            1,
            "`Trainer(val_check_interval=1)` was configured so validation will run after every batch.",
        ),
        (
            "val_check_interval",
            1.0,
            "`Trainer(val_check_interval=1.0)` was configured so validation will run at the end of the training "
            "epoch..",
        ),
    ],
)
def test_a_flag_given_as_one_says_what_it_means(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, flag: str, value: float, line: str
) -> None:
    with caplog.at_level(logging.INFO):
        quiet_trainer(tmp_path, **{flag: value})
        quiet_trainer(tmp_path, **{flag: 2 if isinstance(value, int) else 0.5})
        quiet_trainer(tmp_path, fast_dev_run=2, **{flag: value})  # fast_dev_run sets the limits itself
    assert [message for message in info_lines(caplog) if "was configured so" in message] == [line]


class TrainingHooks(L.Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.calls.append("on_fit_start")

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.calls.append("on_sanity_check_start")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.calls.append("on_train_start")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self.calls.append("on_fit_end")


@pytest.mark.parametrize("limit", [0, 0.0])
def test_limit_train_batches_0_skips_training_without_a_word(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, limit: float
) -> None:
    hooks = TrainingHooks()
    model = CountingModel()
    with caplog.at_level(logging.INFO):
        quiet_trainer(tmp_path, limit_train_batches=limit, callbacks=[hooks]).fit(model, make_loader(), make_loader())
    # the sanity check still runs; no epoch does
    assert (model.train_batches, model.val_batches) == (0, 2)
    assert hooks.calls == ["on_fit_start", "on_sanity_check_start", "on_fit_end"]
    assert not [line for line in info_lines(caplog) if "stopped" in line]


# ---- 5. val_check_interval ------------------------------------------------------------------------------------------


def test_an_int_val_check_interval_past_the_epoch_is_refused_in_lightning_words(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as raised:
        quiet_trainer(tmp_path, val_check_interval=5).fit(TinyModel(), make_loader(), make_loader())
    assert (
        " `val_check_interval` (5) must be less than or equal to the number of the training batches (4). If you "
        "want to disable validation set `limit_val_batches` to 0.0 instead. If you want to validate based on the "
        "total training batches, set `check_val_every_n_epoch=None`." in str(raised.value)
    )
    # without validation the interval does not matter
    quiet_trainer(tmp_path, val_check_interval=5, limit_val_batches=0).fit(TinyModel(), make_loader())


def test_a_fractional_val_check_interval_needs_a_training_loader_with_a_length(tmp_path: Path) -> None:
    with pytest.raises(L.MisconfigurationException) as raised:
        quiet_trainer(tmp_path, val_check_interval=0.5).fit(TinyModel(), NoLength(), make_loader())
    assert (
        "When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)` must be time based, "
        "`1.0` or an int. An int k specifies checking validation every k training batches." in str(raised.value)
    )
    trainer = quiet_trainer(tmp_path, val_check_interval=2, num_sanity_val_steps=0)
    model = CountingModel()
    trainer.fit(model, NoLength(), make_loader(8))
    assert model.val_batches == 2  # after batches 2 and 4


def test_a_duration_with_an_unknown_key_is_refused_with_timedeltas_words(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="'secs' is an invalid keyword argument"):
        quiet_trainer(tmp_path, val_check_interval={"secs": 1})


@pytest.mark.parametrize("interval", ["00:00:00:00", {"seconds": 0}])
def test_a_zero_duration_validates_after_every_batch(tmp_path: Path, interval: Any) -> None:
    model = CountingModel()
    trainer = quiet_trainer(tmp_path, val_check_interval=interval, num_sanity_val_steps=0)
    trainer.fit(model, make_loader(), make_loader(8))
    assert trainer.val_check_batch is None
    assert model.val_batches == 4


# ---- 6. reload_dataloaders_every_n_epochs with infrequent validation -------------------------------------------------


class LoaderRequests(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, int]] = []

    def train_dataloader(self) -> DataLoader:
        self.requests.append(("train", self.trainer.current_epoch))
        return make_loader()

    def val_dataloader(self) -> DataLoader:
        self.requests.append(("val", self.trainer.current_epoch))
        return make_loader(8)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            {"reload_dataloaders_every_n_epochs": 1, "check_val_every_n_epoch": 2, "max_epochs": 5},
            ["val 0", "train 0", "train 1", "val 1", "train 2", "train 3", "val 3", "train 4"],
        ),
        (
            # the sanity check's request counts only when its epoch validates: epoch 1's validation requests again
            {"reload_dataloaders_every_n_epochs": 2, "check_val_every_n_epoch": 2, "max_epochs": 6},
            ["val 0", "train 0", "val 1", "train 2", "val 3", "train 4", "val 5"],
        ),
        (
            {"reload_dataloaders_every_n_epochs": 2, "check_val_every_n_epoch": 3, "max_epochs": 7},
            ["val 0", "train 0", "train 2", "val 2", "train 4", "val 5", "train 6"],
        ),
        (
            {"reload_dataloaders_every_n_epochs": 3, "max_epochs": 5, "num_sanity_val_steps": 0},
            ["train 0", "val 0", "train 3", "val 3"],
        ),
        (
            # validation every 6 batches across epochs of 4: epoch 3 reaches no check, so requests no val loader
            {
                "reload_dataloaders_every_n_epochs": 1,
                "check_val_every_n_epoch": None,
                "val_check_interval": 6,
                "max_epochs": 4,
                "num_sanity_val_steps": 0,
            },
            ["train 0", "val 0", "train 1", "val 1", "train 2", "val 2", "train 3"],
        ),
    ],
)
def test_reloads_with_infrequent_validation(tmp_path: Path, flags: dict[str, Any], expected: list[str]) -> None:
    model = LoaderRequests()
    quiet_trainer(tmp_path, **flags).fit(model)
    assert [f"{kind} {epoch}" for kind, epoch in model.requests] == expected


# ---- 7. log_every_n_steps --------------------------------------------------------------------------------------------


class LoggedLoss(TinyModel):
    def __init__(self, on_epoch: bool) -> None:
        super().__init__()
        self.on_epoch = on_epoch

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss, on_epoch=self.on_epoch)
        return loss


def _log_steps(tmp_path: Path, on_epoch: bool, validate: bool, **flags: Any) -> CallLogger:
    logger = CallLogger()
    options: dict[str, Any] = {"max_epochs": 3, "num_sanity_val_steps": 0, "limit_val_batches": 2 if validate else 0}
    trainer = quiet_trainer(tmp_path, logger=logger, **{**options, **flags})
    trainer.fit(LoggedLoss(on_epoch), make_loader(56), make_loader(16))  # 7 training batches per epoch
    return logger


STEPS_EVERY_3 = [2, 5, 8, 11, 14, 17, 20]


@pytest.mark.parametrize("validate", [False, True])
def test_step_metrics_reach_the_logger_every_n_steps(tmp_path: Path, validate: bool) -> None:
    logger = _log_steps(tmp_path, on_epoch=False, validate=validate, log_every_n_steps=3)
    assert logger.steps("loss") == STEPS_EVERY_3
    assert logger.steps("val_loss") == ([6, 13, 20] if validate else [])
    # every logging call is followed by a save, and the run ends with one finalize
    assert all(logger.calls[i + 1] == ("save",) for i, call in enumerate(logger.calls) if call[0] == "log_metrics")
    assert [call for call in logger.calls if call[0] == "finalize"] == [("finalize", "success")]


@pytest.mark.parametrize("validate", [False, True])
def test_on_epoch_values_are_logged_at_each_epochs_last_step(tmp_path: Path, validate: bool) -> None:
    logger = _log_steps(tmp_path, on_epoch=True, validate=validate, log_every_n_steps=3)
    assert logger.steps("loss_step") == STEPS_EVERY_3
    assert logger.steps("loss_epoch") == [6, 13, 20]
    expected_order = ["val_loss", "loss_epoch"] if validate else ["loss_epoch"]
    at_6 = [name for call in logger.calls if call[0] == "log_metrics" and call[1] == 6 for name in call[2]]
    assert [name for name in at_6 if name in ("val_loss", "loss_epoch")] == expected_order


def test_an_interval_longer_than_the_epoch_logs_epoch_values_only_and_warns(tmp_path: Path) -> None:
    words = (
        "The number of training batches (7) is smaller than the logging interval Trainer(log_every_n_steps=50). "
        "Set a lower value for log_every_n_steps if you want to see logs for the training epoch."
    )
    with pytest.warns(L.PossibleUserWarning) as caught:
        logger = _log_steps(tmp_path, on_epoch=True, validate=True, log_every_n_steps=50)
    [warning] = [w for w in caught if "logging interval" in str(w.message)]
    assert str(warning.message) == words and issubclass(warning.category, UserWarning)
    assert logger.steps("loss_step") == []
    assert logger.steps("loss_epoch") == logger.steps("val_loss") == [6, 13, 20]


@pytest.mark.parametrize("flags", [{"log_every_n_steps": 7}, {"log_every_n_steps": 0}, {"logger": False}])
def test_no_logging_interval_warning_when_the_epoch_is_long_enough_or_nothing_logs(
    tmp_path: Path, recwarn: pytest.WarningsRecorder, flags: dict[str, Any]
) -> None:
    options: dict[str, Any] = {"logger": CallLogger(), **flags}
    quiet_trainer(tmp_path, **options).fit(TinyModel(), make_loader(56))
    assert not [w for w in recwarn if "logging interval" in str(w.message)]


@pytest.mark.parametrize(("accumulate", "every", "steps"), [(2, 1, [0, 1, 2, 3, 4, 5, 6, 7]), (3, 2, [1, 3, 5])])
def test_batches_that_only_accumulate_log_nothing(
    tmp_path: Path, accumulate: int, every: int, steps: list[int]
) -> None:
    logger = CallLogger()
    trainer = quiet_trainer(
        tmp_path, logger=logger, max_epochs=2, accumulate_grad_batches=accumulate, log_every_n_steps=every
    )
    trainer.fit(LoggedLoss(on_epoch=False), make_loader(56))
    assert logger.steps("loss") == steps


# ---- 10. the logging step after a resume -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("checkpoint", "flags", "saved", "steps"),
    [
        ({}, {"val_check_interval": 0.5}, "epoch=0-step=2.ckpt", [2, 3, 4, 5, 6, 7]),  # saved at a validation's end
        ({}, {"val_check_interval": 0.5}, "epoch=0-step=4.ckpt", [4, 5, 6, 7]),  # ... after the epoch's last batch
        ({"every_n_train_steps": 2}, {"limit_val_batches": 0}, "epoch=0-step=2.ckpt", [2, 3, 4, 5, 6, 7]),
        ({"every_n_train_steps": 4}, {"limit_val_batches": 0}, "epoch=0-step=4.ckpt", [4, 5, 6, 7]),
        (
            {"every_n_train_steps": 1},
            {"limit_val_batches": 0, "accumulate_grad_batches": 2},
            "epoch=0-step=1.ckpt",
            [1, 2, 3],
        ),
    ],
)
def test_a_resumed_fit_logs_at_the_steps_it_would_have_logged_at(
    tmp_path: Path, checkpoint: dict[str, Any], flags: dict[str, Any], saved: str, steps: list[int]
) -> None:
    directory = tmp_path / "checkpoints"
    callback = L.ModelCheckpoint(dirpath=directory, save_top_k=-1, **checkpoint)
    first = quiet_trainer(tmp_path, callbacks=[callback], enable_checkpointing=True, num_sanity_val_steps=0, **flags)
    first.fit(TinyModel(), make_loader(), make_loader(16))
    logger = CallLogger()
    resumed = quiet_trainer(tmp_path, logger=logger, log_every_n_steps=1, max_epochs=2, num_sanity_val_steps=0, **flags)
    with pytest.warns(UserWarning, match="holds state for callbacks that are not in this run"):
        resumed.fit(TinyModel(), make_loader(), make_loader(16), ckpt_path=directory / saved)
    assert logger.steps("train_loss") == steps
    stepped = resumed.fit_loop.state_dict()["epoch_loop.state_dict"]["_batches_that_stepped"]
    assert stepped == resumed.global_step


def test_the_loop_state_after_a_resume_from_last_ckpt_is_the_uninterrupted_runs(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    callback = L.ModelCheckpoint(dirpath=directory, save_last=True, every_n_train_steps=2)
    first = quiet_trainer(tmp_path, callbacks=[callback], enable_checkpointing=True, max_steps=6, max_epochs=2)
    first.fit(TinyModel(), make_loader(), make_loader(16))
    resumed = quiet_trainer(tmp_path, max_epochs=3)
    with pytest.warns(UserWarning, match="holds state for callbacks that are not in this run"):
        resumed.fit(TinyModel(), make_loader(), make_loader(16), ckpt_path=directory / "last.ckpt")
    straight = quiet_trainer(tmp_path, max_epochs=3)
    straight.fit(TinyModel(), make_loader(), make_loader(16))
    assert resumed.fit_loop.state_dict() == straight.fit_loop.state_dict()
    assert (resumed.global_step, resumed.current_epoch) == (12, 3)


class ValStateAtTrainStart(L.Callback):
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.val_state = trainer.fit_loop.epoch_loop.val_loop.batch_progress.state_dict()


def test_the_sanity_check_leaves_no_trace_in_the_validation_progress(tmp_path: Path) -> None:
    probe = ValStateAtTrainStart()
    quiet_trainer(tmp_path, callbacks=[probe]).fit(TinyModel(), make_loader(), make_loader(16))
    zero = {"ready": 0, "started": 0, "processed": 0, "completed": 0}
    assert probe.val_state == {"total": zero, "current": zero, "is_last_batch": False}


# ---- 11. Lightning's INFO lines on the console -----------------------------------------------------------------------

SCRIPT = """
import logging, sys, warnings
warnings.simplefilter("ignore")
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.INFO, format="root %(name)s: %(message)s", stream=sys.stderr)
import statemachine as L
from statemachine.demos.boring_classes import BoringModel
trainer = L.Trainer(max_epochs=2, limit_train_batches=1, limit_val_batches=2, logger=False,
                    enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
trainer.fit(BoringModel())
"""


def _stderr_of_a_run(tmp_path: Path, mode: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stderr.splitlines() if line.strip()]


def test_a_run_without_logging_setup_shows_lightnings_info_lines(tmp_path: Path) -> None:
    cuda = torch.cuda.is_available()
    assert _stderr_of_a_run(tmp_path, "plain") == [
        f"GPU available: {cuda}{' (cuda)' if cuda else ''}, used: {cuda}",
        "TPU available: False, using: 0 TPU cores",
        "`Trainer(limit_train_batches=1)` was configured so 1 batch per epoch will be used.",
        "`Trainer.fit` stopped: `max_epochs=2` reached.",
    ]


def test_a_users_logging_setup_decides_where_the_lines_go(tmp_path: Path) -> None:
    lines = _stderr_of_a_run(tmp_path, "configured")
    assert "root statemachine: TPU available: False, using: 0 TPU cores" in lines
    assert "TPU available: False, using: 0 TPU cores" not in lines  # no second copy from a handler of ours
    assert "root statemachine: `Trainer.fit` stopped: `max_epochs=2` reached." in lines


def test_a_gpu_left_unused_is_pointed_out_as_lightning_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning warns when a GPU is there but the Trainer runs elsewhere; no GPU here, so CUDA is said to exist."""
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    with pytest.warns(
        PossibleUserWarning, match=r"GPU available but not used. You can set it by doing `Trainer\(accelerator='gpu'\)`"
    ):
        L.Trainer(accelerator="cpu", logger=False, default_root_dir=tmp_path)
