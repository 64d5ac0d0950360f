"""The loop objects as Lightning users read and drive them (`trainer.fit_loop`, its `epoch_loop`, the evaluation
loops): their counters per epoch and per run, their limits, their state dicts. Every number was observed under
Lightning 2.6.6 with the same script."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import quiet_trainer

import statemachine as L
from statemachine.demos.boring_classes import BoringModel, ManualOptimBoringModel


def fit_two_epochs(tmp_path: Path, model: L.LightningModule | None = None, **kwargs: Any) -> L.Trainer:
    options: dict[str, Any] = {"max_epochs": 2, "limit_train_batches": 3, "limit_val_batches": 2, **kwargs}
    trainer = quiet_trainer(tmp_path, **options)
    trainer.fit(model or BoringModel())
    return trainer


def test_step_counters_count_the_epoch_in_current_and_the_run_in_total(tmp_path: Path) -> None:
    trainer = fit_two_epochs(tmp_path)
    epoch_loop = trainer.fit_loop.epoch_loop
    progress = epoch_loop.automatic_optimization.optim_progress
    assert progress.optimizer_steps == 6
    assert progress.optimizer.step.state_dict() == {
        "total": {"ready": 6, "completed": 6},
        "current": {"ready": 3, "completed": 3},
    }
    assert progress.optimizer.zero_grad.current.completed == 3 and progress.optimizer.zero_grad.total.completed == 6
    assert epoch_loop.scheduler_progress.state_dict() == {
        "total": {"ready": 2, "completed": 2},
        "current": {"ready": 1, "completed": 1},
    }
    assert (epoch_loop.batch_progress.current.ready, epoch_loop.batch_progress.total.ready) == (3, 6)
    assert trainer.fit_loop.epoch_progress.current.completed == 2


def test_manual_steps_count_the_whole_run_in_current_too(tmp_path: Path) -> None:
    trainer = fit_two_epochs(tmp_path, ManualOptimBoringModel())
    manual = trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
    assert manual.state_dict() == {"total": {"ready": 6, "completed": 6}, "current": {"ready": 6, "completed": 6}}
    assert trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer_steps == 0
    assert trainer.global_step == 6


class ValidationCounters(L.Callback):
    """What the fit's validation loop counted, as seen when each validation starts and when each epoch ends."""

    def __init__(self) -> None:
        self.at_start: list[tuple[int, int, bool]] = []
        self.at_epoch_end: list[tuple[int, int]] = []

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        progress = trainer.fit_loop.epoch_loop.val_loop.batch_progress
        self.at_start.append((progress.total.completed, progress.current.completed, progress.is_last_batch))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        progress = trainer.fit_loop.epoch_loop.val_loop.batch_progress
        self.at_epoch_end.append((progress.total.completed, progress.current.completed))


def test_the_fit_validation_counts_its_epochs_runs_and_starts_each_run_at_zero(tmp_path: Path) -> None:
    counters = ValidationCounters()
    fit_two_epochs(tmp_path, val_check_interval=1, num_sanity_val_steps=2, callbacks=[counters])
    # Three validations per epoch of 2 batches each; the total starts again with each epoch, the sanity check
    # counts nowhere, and a run's `current` is zero by `on_validation_start`.
    assert counters.at_start == [(0, 0, False), (0, 0, False), (2, 0, False), (4, 0, False)] + [
        (0, 0, False),
        (2, 0, False),
        (4, 0, False),
    ]
    assert counters.at_epoch_end == [(6, 2), (6, 2)]


def test_validate_counts_every_call_in_total_and_stores_its_loop_state(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, limit_val_batches=2)
    model = BoringModel()
    trainer.validate(model, verbose=False)
    trainer.validate(model, verbose=False)
    assert trainer.validate_loop.state_dict() == {
        "state_dict": {},
        "batch_progress": {
            "total": {"ready": 4, "started": 4, "processed": 4, "completed": 4},
            "current": {"ready": 2, "started": 2, "processed": 2, "completed": 2},
            "is_last_batch": True,
        },
    }
    trainer.predict(model, dataloaders=model.val_dataloader())
    assert "is_last_batch" not in trainer.predict_loop.state_dict()["batch_progress"]
    fresh = quiet_trainer(tmp_path)
    fresh.validate_loop.load_state_dict(trainer.validate_loop.state_dict())
    assert fresh.validate_loop.batch_progress.total.completed == 4


def test_a_checkpoint_stores_each_loops_state_dict(tmp_path: Path) -> None:
    model = BoringModel()
    trainer = fit_two_epochs(tmp_path, model)
    trainer.validate(model, verbose=False)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    loops = torch.load(tmp_path / "last.ckpt", weights_only=False)["loops"]
    assert loops["fit_loop"] == trainer.fit_loop.state_dict()
    assert loops["validate_loop"] == trainer.validate_loop.state_dict()
    assert loops["test_loop"] == trainer.test_loop.state_dict()
    assert loops["predict_loop"] == trainer.predict_loop.state_dict()
    assert (
        loops["fit_loop"]["epoch_loop.val_loop.batch_progress"]
        == (trainer.fit_loop.epoch_loop.val_loop.state_dict()["batch_progress"])
    )


def test_a_fit_loop_state_dict_loads_into_another_trainer(tmp_path: Path) -> None:
    trainer = fit_two_epochs(tmp_path)
    other = quiet_trainer(tmp_path)
    other.fit_loop.load_state_dict(trainer.fit_loop.state_dict())
    assert (other.current_epoch, other.global_step) == (2, 6)
    assert other.fit_loop.state_dict() == trainer.fit_loop.state_dict()


class TrainStarts(L.Callback):
    def __init__(self) -> None:
        self.starts: list[tuple[int, int]] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.starts.append((trainer.current_epoch, trainer.global_step))


def test_raising_the_loops_limits_lets_the_next_fit_go_on(tmp_path: Path) -> None:
    starts = TrainStarts()
    model = BoringModel()
    trainer = fit_two_epochs(tmp_path, model, callbacks=[starts])
    trainer.fit_loop.max_epochs = 3
    assert trainer.max_epochs == 3
    trainer.fit(model)
    assert (trainer.current_epoch, trainer.global_step) == (3, 9)
    trainer.fit_loop.max_epochs = 10
    trainer.fit_loop.epoch_loop.max_steps = 12
    assert (trainer.max_steps, trainer.fit_loop.max_steps) == (12, 12)
    trainer.fit(model)
    assert (trainer.current_epoch, trainer.global_step) == (4, 12)
    trainer.fit(model)  # nothing left to do: the fit stops before on_train_start
    assert starts.starts == [(0, 0), (2, 6), (3, 9)]
    trainer.fit_loop.epoch_loop.min_steps = 4
    trainer.fit_loop.min_epochs = 1
    assert (trainer.min_steps, trainer.min_epochs) == (4, 1)


def test_max_steps_is_set_on_the_epoch_loop_not_the_fit_loop(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(AttributeError):
        trainer.fit_loop.max_steps = 5  # type: ignore[misc]


def test_fit_says_why_it_stopped_in_lightnings_words(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        fit_two_epochs(tmp_path)
        fit_two_epochs(tmp_path, max_steps=4)
    stopped = [record.getMessage() for record in caplog.records if "stopped" in record.getMessage()]
    assert stopped == [
        "`Trainer.fit` stopped: `max_epochs=2` reached.",
        "`Trainer.fit` stopped: `max_steps=4` reached.",
    ]


class StopAfterFirstEpoch(L.Callback):
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.should_stop = True


def test_a_stop_the_user_asked_for_is_a_debug_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        fit_two_epochs(tmp_path, callbacks=[StopAfterFirstEpoch()])
    [record] = [record for record in caplog.records if "stopped" in record.getMessage()]
    assert (record.levelno, record.getMessage()) == (
        logging.DEBUG,
        "`Trainer.fit` stopped: `trainer.should_stop` was set.",
    )
