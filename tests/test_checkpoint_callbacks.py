"""ModelCheckpoint, EarlyStopping and Timer against a small fake trainer (no training loop involved)."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fsspec
import pytest
import torch

from stages.callbacks import timer as timer_module
from stages.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from stages.callbacks.model_checkpoint import ModelCheckpoint
from stages.callbacks.timer import Timer, parse_duration
from stages.exceptions import MisconfigurationException


class FakeStrategy:
    def broadcast(self, obj: Any) -> Any:
        return obj

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision


class FakeLogger:
    def __init__(self, save_dir: str | None, name: str = "lightning_logs", version: int | str = 0) -> None:
        self.save_dir = save_dir
        self.name = name
        self.version = version
        self.notified: list[str] = []

    @property
    def log_dir(self) -> str:
        return os.path.join(self.save_dir or "", self.name, str(self.version))

    def after_save_checkpoint(self, callback: Any) -> None:
        self.notified.append(callback._last_checkpoint_saved)


class FakeTrainer:
    """The attributes ModelCheckpoint/EarlyStopping/Timer read, and a save_checkpoint writing a small json."""

    def __init__(self, root: Path, **overrides: Any) -> None:
        self.current_epoch = 0
        self.global_step = 0
        self.max_epochs = 10
        self.max_steps = -1
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.default_root_dir = str(root)
        self.loggers: list[FakeLogger] = []
        self.is_global_zero = True
        self.strategy = FakeStrategy()
        self.state = SimpleNamespace(fn="fit")
        self.sanity_checking = False
        self.fast_dev_run: bool | int = False
        self.should_stop = False
        self.val_check_interval: float | int | None = None
        self.check_val_every_n_epoch: int | None = 1
        self.num_val_batches: list[int] = []
        self.num_training_batches = 2
        self.lightning_module = None
        self.saved: list[str] = []
        for key, value in overrides.items():
            setattr(self, key, value)

    def save_checkpoint(self, filepath: str, weights_only: bool = False) -> None:
        fs, path = fsspec.core.url_to_fs(filepath)
        fs.makedirs(os.path.dirname(path), exist_ok=True)
        with fs.open(path, "w") as f:
            json.dump(
                {"epoch": self.current_epoch, "global_step": self.global_step, "weights_only": weights_only},
                f,
            )
        self.saved.append(filepath)


def read(path: str | Path) -> dict[str, Any]:
    with fsspec.open(str(path), "r") as f:
        return json.load(f)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def fit_setup(callback: Any, trainer: FakeTrainer) -> None:
    callback.setup(trainer, None, "fit")
    callback.on_fit_start(trainer, None)
    callback.on_train_start(trainer, None)


def train_epoch(callback: Any, trainer: FakeTrainer, metrics: dict[str, float] | None = None) -> None:
    """Runs `num_training_batches` steps, then logs `metrics` and ends the epoch (no validation)."""
    for batch_idx in range(trainer.num_training_batches):
        trainer.global_step += 1
        callback.on_train_batch_end(trainer, None, None, None, batch_idx)
    trainer.callback_metrics = {k: torch.tensor(v) for k, v in (metrics or {}).items()}
    callback.on_train_epoch_end(trainer, None)
    trainer.current_epoch += 1


def validate(callback: Any, trainer: FakeTrainer, metrics: dict[str, float]) -> None:
    callback.on_validation_start(trainer, None)
    trainer.callback_metrics = {k: torch.tensor(v) for k, v in metrics.items()}
    callback.on_validation_end(trainer, None)


# ---------------------------------------------------------------- ModelCheckpoint: names


def test_default_name_and_template_features(tmp_path: Path) -> None:
    metrics = {"epoch": torch.tensor(3), "step": torch.tensor(12), "val_loss": torch.tensor(0.12345)}
    assert ModelCheckpoint().format_checkpoint_name(metrics) == "epoch=3-step=12.ckpt"
    spec = ModelCheckpoint(filename="{epoch:03d}-{val_loss:.2f}-{missing}")
    assert spec.format_checkpoint_name(metrics) == "epoch=003-val_loss=0.12-missing=0.ckpt"
    plain = ModelCheckpoint(filename="model-{epoch}-{val_loss:.1f}", auto_insert_metric_name=False)
    assert plain.format_checkpoint_name(metrics) == "model-3-0.1.ckpt"
    assert plain.format_checkpoint_name(metrics, filename="last", ver=2) == "last-v2.ckpt"
    in_dir = ModelCheckpoint(dirpath=tmp_path)
    assert in_dir.format_checkpoint_name(metrics) == str(tmp_path / "epoch=3-step=12.ckpt")
    # Longer names sharing a prefix are not clobbered by shorter ones.
    both = ModelCheckpoint(filename="{epoch}-{epoch_loss:.1f}")
    assert both.format_checkpoint_name({**metrics, "epoch_loss": torch.tensor(1.5)}) == "epoch=3-epoch_loss=1.5.ckpt"


def test_constants() -> None:
    assert ModelCheckpoint.CHECKPOINT_JOIN_CHAR == "-"
    assert ModelCheckpoint.CHECKPOINT_EQUALS_CHAR == "="
    assert ModelCheckpoint.CHECKPOINT_NAME_LAST == "last"
    assert ModelCheckpoint.FILE_EXTENSION == ".ckpt"
    assert ModelCheckpoint.STARTING_VERSION == 1


def test_name_collisions_get_version_suffixes(tmp_path: Path) -> None:
    (tmp_path / "epoch=0-step=2.ckpt").write_text("{}")
    (tmp_path / "epoch=0-step=2-v1.ckpt").write_text("{}")
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    assert callback.best_model_path == str(tmp_path / "epoch=0-step=2-v2.ckpt")


def test_version_counter_off_overwrites(tmp_path: Path) -> None:
    (tmp_path / "epoch=0-step=2.ckpt").write_text("{}")
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, enable_version_counter=False)
    with pytest.warns(UserWarning):
        fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    assert names(tmp_path) == ["epoch=0-step=2.ckpt"]
    assert read(tmp_path / "epoch=0-step=2.ckpt")["global_step"] == 2


def test_user_logged_epoch_is_used_as_int(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path)
    fit_setup(callback, trainer)
    train_epoch(callback, trainer, {"epoch": 7.0})
    assert names(tmp_path) == ["epoch=7-step=2.ckpt"]


# ---------------------------------------------------------------- ModelCheckpoint: directory


@pytest.mark.parametrize(
    ("version", "expected"), [(3, "version_3"), ("exp-a", "exp-a")], ids=["int-version", "str-version"]
)
def test_directory_from_first_logger(tmp_path: Path, version: int | str, expected: str) -> None:
    trainer = FakeTrainer(tmp_path / "root", loggers=[FakeLogger(str(tmp_path / "logs"), "run", version)])
    callback = ModelCheckpoint()
    callback.setup(trainer, None, "fit")
    assert callback.dirpath == os.path.join(str(tmp_path / "logs"), "run", expected, "checkpoints")


def test_directory_fallbacks(tmp_path: Path) -> None:
    no_save_dir = FakeTrainer(tmp_path, loggers=[FakeLogger(None, "run", 1)])
    callback = ModelCheckpoint()
    callback.setup(no_save_dir, None, "fit")
    assert callback.dirpath == os.path.join(str(tmp_path), "run", "version_1", "checkpoints")
    no_logger = ModelCheckpoint()
    no_logger.setup(FakeTrainer(tmp_path), None, "fit")
    assert no_logger.dirpath == os.path.join(str(tmp_path), "checkpoints")
    explicit = ModelCheckpoint(dirpath=tmp_path / "mine")
    explicit.setup(no_save_dir, None, "fit")
    assert explicit.dirpath == os.path.realpath(tmp_path / "mine")


# ---------------------------------------------------------------- ModelCheckpoint: top-k


def test_top_k_min_keeps_best_and_deletes_evicted(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2, filename="{epoch}")
    fit_setup(callback, trainer)
    for loss in (3.0, 2.0, 4.0, 1.0):
        train_epoch(callback, trainer, {"val_loss": loss})
    assert names(tmp_path) == ["epoch=1.ckpt", "epoch=3.ckpt"]
    assert callback.best_model_path == str(tmp_path / "epoch=3.ckpt")
    assert callback.best_model_score == pytest.approx(1.0)
    assert callback.kth_best_model_path == str(tmp_path / "epoch=1.ckpt")
    assert float(callback.kth_value) == pytest.approx(2.0)
    assert {Path(p).name: float(v) for p, v in callback.best_k_models.items()} == {
        "epoch=1.ckpt": 2.0,
        "epoch=3.ckpt": 1.0,
    }
    assert callback.current_score == pytest.approx(1.0)


def test_top_k_max_and_nan_ranks_worst(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="acc", mode="max", save_top_k=2, filename="{epoch}")
    fit_setup(callback, trainer)
    for acc in (float("nan"), 0.5, 0.7, 0.6):
        train_epoch(callback, trainer, {"acc": acc})
    # The NaN epoch was stored as -inf, so the first better value evicted it.
    assert names(tmp_path) == ["epoch=2.ckpt", "epoch=3.ckpt"]
    assert callback.best_model_path == str(tmp_path / "epoch=2.ckpt")
    assert callback.best_model_score == pytest.approx(0.7)


def test_no_monitor_top_1_keeps_newest_and_minus_1_keeps_all(tmp_path: Path) -> None:
    newest_dir, all_dir = tmp_path / "newest", tmp_path / "all"
    newest, keep_all = ModelCheckpoint(dirpath=newest_dir), ModelCheckpoint(dirpath=all_dir, save_top_k=-1)
    for callback in (newest, keep_all):
        trainer = FakeTrainer(tmp_path)
        fit_setup(callback, trainer)
        for _ in range(3):
            train_epoch(callback, trainer)
    assert names(newest_dir) == ["epoch=2-step=6.ckpt"]
    assert newest.best_model_path == str(newest_dir / "epoch=2-step=6.ckpt")
    assert names(all_dir) == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt"]


def test_save_top_k_zero_saves_nothing_but_last_at_train_end(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, save_top_k=0, save_last=True)
    fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    assert trainer.saved == []
    callback.on_train_end(trainer, None)
    assert names(tmp_path) == ["last.ckpt"]
    assert callback.last_model_path == str(tmp_path / "last.ckpt")


def test_evicted_files_are_deleted_through_fsspec_urls() -> None:
    root = "memory://ckpt-test-urls"
    trainer = FakeTrainer(Path("/unused"))
    callback = ModelCheckpoint(dirpath=root, monitor="loss", filename="{epoch}")
    fit_setup(callback, trainer)
    train_epoch(callback, trainer, {"loss": 2.0})
    train_epoch(callback, trainer, {"loss": 1.0})
    fs = fsspec.filesystem("memory")
    assert not fs.exists(f"{root}/epoch=0.ckpt")
    assert fs.exists(f"{root}/epoch=1.ckpt")
    assert callback.best_model_path == f"{root}/epoch=1.ckpt"
    fs.rm(root, recursive=True)


def test_files_outside_dirpath_and_resume_file_are_never_deleted(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, ckpt_path=str(tmp_path / "epoch=0-step=2.ckpt"))
    callback = ModelCheckpoint(dirpath=tmp_path)
    fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    train_epoch(callback, trainer)
    assert names(tmp_path) == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt"]


# ---------------------------------------------------------------- ModelCheckpoint: last


def test_save_last_follows_each_save_and_versions_an_old_last(tmp_path: Path) -> None:
    (tmp_path / "last.ckpt").write_text("{}")
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    with pytest.warns(UserWarning):
        fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    train_epoch(callback, trainer)
    assert names(tmp_path) == ["epoch=1-step=4.ckpt", "last-v1.ckpt", "last.ckpt"]
    assert callback.last_model_path == str(tmp_path / "last-v1.ckpt")
    assert read(tmp_path / "last-v1.ckpt")["global_step"] == 4
    callback.on_train_end(trainer, None)
    assert trainer.saved.count(str(tmp_path / "last-v1.ckpt")) == 2


def test_save_last_link_points_at_latest_save(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, save_last="link")
    fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    train_epoch(callback, trainer)
    last = tmp_path / "last.ckpt"
    assert last.is_symlink()
    assert os.readlink(last) == "epoch=1-step=4.ckpt"
    assert read(last)["global_step"] == 4
    assert str(last) not in trainer.saved


def test_save_last_without_top_k_save_waits_for_train_end(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, save_last=True, every_n_epochs=2)
    fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    assert trainer.saved == []
    callback.on_train_end(trainer, None)
    assert names(tmp_path) == ["last.ckpt"]
    assert read(tmp_path / "last.ckpt")["global_step"] == 2


# ---------------------------------------------------------------- ModelCheckpoint: triggers


def test_every_n_train_steps_and_once_per_step(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, num_training_batches=5)
    callback = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    assert names(tmp_path) == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]
    # An accumulating batch repeats global_step 4: no second save at that step.
    trainer.global_step = 4
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert len(trainer.saved) == 2


def test_zero_train_time_interval_saves_every_batch(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, train_time_interval=timedelta(0), save_top_k=-1)
    fit_setup(callback, trainer)
    train_epoch(callback, trainer)
    assert names(tmp_path) == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt"]


def test_missing_monitor_defers_step_save_to_validation_end(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, num_training_batches=4, val_check_interval=0.5, num_val_batches=[2])
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", every_n_train_steps=2, filename="{step}")
    fit_setup(callback, trainer)
    trainer.global_step = 2
    callback.on_train_batch_end(trainer, None, None, None, 1)
    assert trainer.saved == []
    validate(callback, trainer, {"val_loss": 0.5})
    assert names(tmp_path) == ["step=2.ckpt"]


def test_stale_monitor_on_last_batch_waits_for_fresh_validation(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, num_val_batches=[2], check_val_every_n_epoch=1)
    callback = ModelCheckpoint(
        dirpath=tmp_path,
        monitor="val_loss",
        every_n_train_steps=2,
        save_on_train_epoch_end=False,
        filename="{step}",
    )
    fit_setup(callback, trainer)
    trainer.callback_metrics = {"val_loss": torch.tensor(9.0)}
    trainer.global_step = 2
    callback.on_train_batch_end(trainer, None, None, None, 1)
    assert trainer.saved == []
    validate(callback, trainer, {"val_loss": 0.25})
    assert callback.best_model_score == pytest.approx(0.25)


def test_save_point_follows_validation_when_it_runs_mid_epoch(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, val_check_interval=0.5, num_val_batches=[2])
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", filename="{epoch}-{step}")
    fit_setup(callback, trainer)
    trainer.global_step = 1
    validate(callback, trainer, {"val_loss": 1.0})
    trainer.global_step = 2
    validate(callback, trainer, {"val_loss": 0.5})
    callback.on_train_epoch_end(trainer, None)
    assert trainer.saved == [str(tmp_path / "epoch=0-step=1.ckpt"), str(tmp_path / "epoch=0-step=2.ckpt")]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, True),
        ({"num_val_batches": [3]}, True),
        ({"num_val_batches": [3], "val_check_interval": 0.25}, False),
        ({"num_val_batches": [3], "val_check_interval": "00:00:01:00"}, False),
        ({"check_val_every_n_epoch": 2}, False),
        ({"check_val_every_n_epoch": None}, False),
    ],
)
def test_save_on_train_epoch_end_decision(tmp_path: Path, overrides: dict[str, Any], expected: bool) -> None:
    trainer = FakeTrainer(tmp_path, **overrides)
    assert ModelCheckpoint()._should_save_on_train_epoch_end(trainer) is expected
    assert (
        ModelCheckpoint(save_on_train_epoch_end=not expected)._should_save_on_train_epoch_end(trainer) is not expected
    )


def test_missing_monitor_warns_in_training_and_raises_after_validation(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, num_val_batches=[1])
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss")
    fit_setup(callback, trainer)
    with pytest.warns(UserWarning, match="could not find the monitored key"):
        train_epoch(callback, trainer, {"train_loss": 1.0})
    assert trainer.saved == []
    callback._save_on_train_epoch_end = False
    trainer.global_step += 1
    with pytest.raises(MisconfigurationException, match="'val_loss'.*train_loss"):
        validate(callback, trainer, {"train_loss": 1.0})


@pytest.mark.parametrize(
    "overrides", [{"sanity_checking": True}, {"state": SimpleNamespace(fn="validate")}, {"fast_dev_run": 1}]
)
def test_never_saves_in_sanity_check_outside_fit_or_fast_dev_run(tmp_path: Path, overrides: dict[str, Any]) -> None:
    trainer = FakeTrainer(tmp_path, **overrides)
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True, save_on_exception=True)
    fit_setup(callback, trainer)
    trainer.global_step = 3
    validate(callback, trainer, {"val_loss": 1.0})
    callback.on_train_epoch_end(trainer, None)
    callback.on_exception(trainer, None, RuntimeError("boom"))
    callback.on_train_end(trainer, None)
    assert trainer.saved == []


def test_on_exception_saves_a_clearly_named_file_and_notifies_loggers(tmp_path: Path) -> None:
    logger = FakeLogger(str(tmp_path))
    trainer = FakeTrainer(tmp_path, loggers=[logger])
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_on_exception=True, save_weights_only=True)
    fit_setup(callback, trainer)
    trainer.global_step = 1
    callback.on_exception(trainer, None, KeyboardInterrupt())
    exception_file = tmp_path / "ckpts" / "exception-epoch=0-step=1.ckpt"
    assert read(exception_file)["weights_only"] is True
    assert logger.notified == [str(exception_file)]
    assert ModelCheckpoint(dirpath=tmp_path / "off").save_on_exception is False


# ---------------------------------------------------------------- ModelCheckpoint: state


def test_state_key_and_state_dict(tmp_path: Path) -> None:
    assert ModelCheckpoint().state_key == (
        "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1,"
        " 'train_time_interval': None}"
    )
    assert ModelCheckpoint(monitor="acc", mode="max", every_n_train_steps=5).state_key == (
        "ModelCheckpoint{'monitor': 'acc', 'mode': 'max', 'every_n_train_steps': 5, 'every_n_epochs': 0,"
        " 'train_time_interval': None}"
    )
    trainer = FakeTrainer(tmp_path)
    callback = ModelCheckpoint(dirpath=tmp_path, monitor="loss", save_last=True)
    fit_setup(callback, trainer)
    train_epoch(callback, trainer, {"loss": 0.5})
    state = callback.state_dict()
    assert list(state) == [
        "monitor",
        "best_model_score",
        "best_model_path",
        "current_score",
        "dirpath",
        "best_k_models",
        "kth_best_model_path",
        "kth_value",
        "last_model_path",
    ]
    restored = ModelCheckpoint(dirpath=tmp_path, monitor="loss", save_last=True)
    restored.load_state_dict(state)
    assert restored.best_model_path == callback.best_model_path
    assert restored.best_k_models == callback.best_k_models
    assert restored.last_model_path == str(tmp_path / "last.ckpt")

    moved = ModelCheckpoint(dirpath=tmp_path / "elsewhere", monitor="loss")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        moved.load_state_dict(state)
    assert moved.best_model_path == callback.best_model_path
    assert moved.best_k_models == {}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "mean"}, MisconfigurationException, "'mean'"),
        ({"save_top_k": -2}, MisconfigurationException, "save_top_k=-2"),
        ({"save_top_k": 3}, MisconfigurationException, "monitor=None"),
        ({"every_n_epochs": -1}, MisconfigurationException, "every_n_epochs=-1"),
        ({"every_n_train_steps": 2, "every_n_epochs": 1}, MisconfigurationException, "mutually exclusive"),
        (
            {"every_n_train_steps": 2, "train_time_interval": timedelta(1)},
            MisconfigurationException,
            "exclusive",
        ),
        ({"save_last": "copy"}, MisconfigurationException, "'copy'"),
        ({"train_time_interval": 60}, TypeError, "timedelta"),
        ({"monitor": 3}, TypeError, "monitor=3"),
    ],
)
def test_invalid_arguments_are_refused(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ModelCheckpoint(**kwargs)


# ---------------------------------------------------------------- EarlyStopping


def run_checks(callback: EarlyStopping, trainer: FakeTrainer, values: list[float], key: str = "val_loss") -> int:
    """Feeds one value per epoch; returns how many epochs ran before should_stop was set."""
    callback.setup(trainer, None, "fit")
    for epoch, value in enumerate(values):
        trainer.current_epoch = epoch
        trainer.callback_metrics = {key: torch.tensor(value)}
        callback.on_train_epoch_end(trainer, None)
        if trainer.should_stop:
            return epoch + 1
    return len(values)


def test_early_stopping_patience(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = EarlyStopping("val_loss", patience=2)
    assert run_checks(callback, trainer, [1.0, 0.9, 0.95, 0.92, 0.5]) == 4
    assert callback.wait_count == 2
    assert callback.stopped_epoch == 3
    assert callback.best_score == pytest.approx(0.9)
    assert callback.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert "did not improve in the last 2 records" in (callback.stopping_reason_message or "")


def test_early_stopping_min_delta_and_max_mode(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = EarlyStopping("acc", mode="max", min_delta=0.1, patience=2)
    # +0.05 is within min_delta, so it does not reset the wait.
    assert run_checks(callback, trainer, [0.5, 0.55, 0.58, 0.9], key="acc") == 3
    assert callback.best_score == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kwargs", "values", "reason"),
    [
        ({"stopping_threshold": 0.1}, [0.5, 0.05, 0.01], EarlyStoppingReason.STOPPING_THRESHOLD),
        ({"divergence_threshold": 5.0}, [0.5, 6.0, 0.01], EarlyStoppingReason.DIVERGENCE_THRESHOLD),
        ({}, [0.5, float("nan"), 0.01], EarlyStoppingReason.NON_FINITE_METRIC),
    ],
)
def test_early_stopping_thresholds_and_finite_check(
    tmp_path: Path, kwargs: dict[str, Any], values: list[float], reason: EarlyStoppingReason
) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = EarlyStopping("val_loss", patience=10, **kwargs)
    assert run_checks(callback, trainer, values) == 2
    assert callback.stopping_reason is reason


def test_early_stopping_ignores_nan_without_check_finite(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    callback = EarlyStopping("val_loss", patience=10, check_finite=False)
    assert run_checks(callback, trainer, [0.5, float("nan"), 0.4]) == 3
    assert callback.best_score == pytest.approx(0.4)
    assert callback.stopping_reason is EarlyStoppingReason.NOT_STOPPED


def test_early_stopping_missing_metric(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path)
    with pytest.raises(RuntimeError, match="`val_loss` which is not available.*`other`"):
        run_checks(EarlyStopping("val_loss"), trainer, [1.0], key="other")
    lenient = EarlyStopping("val_loss", strict=False)
    assert run_checks(lenient, trainer, [1.0, 1.0, 1.0, 1.0], key="other") == 4
    assert lenient.wait_count == 0 and not trainer.should_stop


def test_early_stopping_check_point_and_inactive_states(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, val_check_interval=0.5)
    callback = EarlyStopping("val_loss", patience=0)
    callback.setup(trainer, None, "fit")
    trainer.callback_metrics = {"val_loss": torch.tensor(1.0)}
    callback.on_train_epoch_end(trainer, None)
    assert callback.wait_count == 0
    trainer.sanity_checking = True
    callback.on_validation_end(trainer, None)
    assert callback.best_score == torch.inf
    trainer.sanity_checking = False
    callback.on_validation_end(trainer, None)
    assert callback.best_score == pytest.approx(1.0)
    callback.on_validation_end(trainer, None)
    assert trainer.should_stop


def test_early_stopping_state(tmp_path: Path) -> None:
    callback = EarlyStopping("val_loss", mode="max")
    assert callback.state_key == "EarlyStopping{'monitor': 'val_loss', 'mode': 'max'}"
    run_checks(callback, FakeTrainer(tmp_path), [0.5, 0.4], key="val_loss")
    state = callback.state_dict()
    assert set(state) == {"wait_count", "stopped_epoch", "best_score", "patience"}
    restored = EarlyStopping("val_loss", mode="max", patience=9)
    restored.load_state_dict(state)
    assert (restored.wait_count, restored.patience, float(restored.best_score)) == (1, 3, 0.5)


def test_early_stopping_refuses_bad_arguments() -> None:
    with pytest.raises(MisconfigurationException, match="'avg'"):
        EarlyStopping("loss", mode="avg")
    with pytest.raises(ValueError, match="patience=-1"):
        EarlyStopping("loss", patience=-1)
    with pytest.raises(ValueError, match="min_delta=-0.1"):
        EarlyStopping("loss", min_delta=-0.1)


# ---------------------------------------------------------------- Timer


def test_parse_duration() -> None:
    assert parse_duration(None) is None
    assert parse_duration("01:02:03:04") == timedelta(days=1, hours=2, minutes=3, seconds=4)
    assert parse_duration({"hours": 1, "minutes": 30}) == timedelta(hours=1, minutes=30)
    assert parse_duration(timedelta(seconds=5)) == timedelta(seconds=5)
    for bad in ("1:2:3", "00:00:61", "abc", "00:01:00:00:00"):
        with pytest.raises(ValueError, match=repr(bad)):
            parse_duration(bad)
    with pytest.raises(ValueError, match="'hourz'"):
        parse_duration({"hourz": 1})
    with pytest.raises(TypeError, match="60"):
        parse_duration(60)  # type: ignore[arg-type]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_timer_stops_after_duration_per_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(timer_module.time, "monotonic", clock)
    trainer = FakeTrainer(tmp_path)
    callback = Timer(duration="00:00:01:00", verbose=False)
    callback.on_fit_start(trainer, None)
    callback.on_train_start(trainer, None)
    clock.now += 59
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert not trainer.should_stop
    assert callback.time_remaining() == pytest.approx(1.0)
    clock.now += 1
    callback.on_train_batch_end(trainer, None, None, None, 1)
    assert trainer.should_stop
    callback.on_train_end(trainer, None)
    clock.now += 100
    assert callback.time_elapsed("train") == pytest.approx(60.0)
    assert callback.start_time("train") == 1000.0 and callback.end_time("train") == 1060.0


def test_timer_epoch_interval_and_other_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(timer_module.time, "monotonic", clock)
    trainer = FakeTrainer(tmp_path)
    callback = Timer(duration={"seconds": 10}, interval="epoch")
    callback.on_train_start(trainer, None)
    clock.now += 20
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert not trainer.should_stop
    callback.on_validation_start(trainer, None)
    clock.now += 3
    callback.on_validation_end(trainer, None)
    callback.on_train_epoch_end(trainer, None)
    assert trainer.should_stop
    assert callback.time_elapsed("validate") == pytest.approx(3.0)
    assert callback.time_elapsed("test") == 0.0 and callback.start_time("test") is None
    assert Timer().time_remaining() is None
    with pytest.raises(ValueError, match="'predict'"):
        callback.time_elapsed("predict")
    with pytest.raises(MisconfigurationException, match="'batch'"):
        Timer(interval="batch")


def test_timer_state_resumes_the_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(timer_module.time, "monotonic", clock)
    first = Timer(duration=timedelta(seconds=100))
    first.on_train_start(FakeTrainer(tmp_path), None)
    clock.now += 40
    state = first.state_dict()
    assert state == {"time_elapsed": {"train": 40.0, "validate": 0.0, "test": 0.0}}

    resumed = Timer(duration=timedelta(seconds=100))
    resumed.load_state_dict(state)
    trainer = FakeTrainer(tmp_path)
    resumed.on_fit_start(trainer, None)
    assert not trainer.should_stop
    resumed.on_train_start(trainer, None)
    clock.now += 60
    resumed.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.should_stop
    assert resumed.time_elapsed() == pytest.approx(100.0)

    depleted = Timer(duration=timedelta(seconds=30))
    depleted.load_state_dict(state)
    trainer = FakeTrainer(tmp_path)
    depleted.on_fit_start(trainer, None)
    assert trainer.should_stop


def test_timer_never_clears_should_stop_and_without_duration_never_sets_it(tmp_path: Path) -> None:
    trainer = FakeTrainer(tmp_path, should_stop=True)
    Timer(duration=timedelta(days=1)).on_fit_start(trainer, None)
    assert trainer.should_stop
    trainer = FakeTrainer(tmp_path)
    unlimited = Timer()
    unlimited.on_fit_start(trainer, None)
    unlimited.on_train_start(trainer, None)
    unlimited.on_train_batch_end(trainer, None, None, None, 0)
    assert not trainer.should_stop
