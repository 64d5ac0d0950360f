"""ModelCheckpoint, EarlyStopping and Timer, driven by the real Trainer on a tiny model (files are real checkpoints)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from conftest import Boom, FakeClock, TinyModel, make_loader
from torch.utils.data import DataLoader

import statemachine as L
from devices.checkpoint_io import load_checkpoint
from stages.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from stages.callbacks.model_checkpoint import ModelCheckpoint
from stages.callbacks.timer import Timer, parse_duration
from stages.exceptions import MisconfigurationException


def batches(count: int, batch_size: int = 4) -> DataLoader:
    return make_loader(n=count * batch_size, batch_size=batch_size)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision


class Scripted(TinyModel):
    """Logs `values[current_epoch]` as the epoch value of `key` while training, and the i-th entry of
    `val_values` as `val_loss` in the i-th validation run (none is logged when `val_values` is empty)."""

    def __init__(
        self, key: str | None = None, values: tuple[float, ...] = (), val_values: tuple[float, ...] = ()
    ) -> None:
        super().__init__()
        self.key, self.values, self.val_values = key, values, val_values
        self.validations = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        if self.key is not None:
            self.log(self.key, float(self.values[self.current_epoch]), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.val_values:
            self.log("val_loss", self.val_values[self.validations])

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.validations += 1


class Listing(L.Callback):
    """Records the checkpoint directory's file names at chosen hooks (they run before ModelCheckpoint's)."""

    def __init__(self, directory: Path, *hooks: str) -> None:
        self.directory, self.hooks = directory, hooks
        self.seen: dict[str, list[str]] = {}

    def _record(self, hook: str, trainer: L.Trainer) -> None:
        if hook in self.hooks:
            self.seen[f"{hook}@{trainer.global_step}"] = names(self.directory) if self.directory.exists() else []

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._record("on_train_epoch_start", trainer)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._record("on_train_batch_start", trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._record("on_validation_start", trainer)

    def on_sanity_check_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._record("on_sanity_check_end", trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._record("on_train_end", trainer)


class SaveStages(L.Callback):
    """The stage the trainer was in at each checkpoint save."""

    def __init__(self) -> None:
        self.stages: list[str] = []

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.stages.append(str(trainer.state.stage))


def trainer_with(tmp_path: Path, *callbacks: L.Callback, **kwargs: Any) -> L.Trainer:
    options: dict[str, Any] = {
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "enable_checkpointing": any(isinstance(c, ModelCheckpoint) for c in callbacks),
        "default_root_dir": str(tmp_path),
        "max_epochs": 1,
        "callbacks": list(callbacks),
    }
    options.update(kwargs)
    return L.Trainer(**options)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def step_of(path: str | Path) -> int:
    return load_checkpoint(str(path))["global_step"]


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


def test_subclass_constants_rename_the_files(tmp_path: Path) -> None:
    class Renamed(ModelCheckpoint):
        CHECKPOINT_JOIN_CHAR = "_"
        CHECKPOINT_EQUALS_CHAR = ":"
        CHECKPOINT_NAME_LAST = "{epoch}-newest"
        FILE_EXTENSION = ".pt"

    directory = tmp_path / "ckpt"
    trainer_with(tmp_path, Renamed(dirpath=directory, save_last=True), max_epochs=2).fit(TinyModel(), batches(2))
    assert names(directory) == ["epoch:1-newest.pt", "epoch:1_step:4.pt"]


def test_name_collisions_get_version_suffixes(tmp_path: Path) -> None:
    tmp_path.joinpath("ckpt").mkdir()
    (tmp_path / "ckpt" / "epoch=0-step=2.ckpt").write_text("{}")
    (tmp_path / "ckpt" / "epoch=0-step=2-v1.ckpt").write_text("{}")
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        trainer_with(tmp_path, callback).fit(TinyModel(), batches(2))
    assert callback.best_model_path == str(tmp_path / "ckpt" / "epoch=0-step=2-v2.ckpt")
    assert step_of(callback.best_model_path) == 2


def test_version_counter_off_overwrites(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "epoch=0-step=2.ckpt").write_text("{}")
    callback = ModelCheckpoint(dirpath=directory, enable_version_counter=False)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        trainer_with(tmp_path, callback).fit(TinyModel(), batches(2))
    assert names(directory) == ["epoch=0-step=2.ckpt"]
    assert step_of(directory / "epoch=0-step=2.ckpt") == 2


def test_user_logged_epoch_is_used_as_int(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    trainer_with(tmp_path, ModelCheckpoint(dirpath=directory)).fit(Scripted("epoch", (7.0,)), batches(2))
    assert names(directory) == ["epoch=7-step=2.ckpt"]


# ---------------------------------------------------------------- ModelCheckpoint: directory


@pytest.mark.parametrize(
    ("version", "expected"), [(3, "version_3"), ("exp-a", "exp-a")], ids=["int-version", "str-version"]
)
def test_directory_from_first_logger(tmp_path: Path, version: int | str, expected: str) -> None:
    loggers = [L.CSVLogger(tmp_path / "logs", name="run", version=version), L.CSVLogger(tmp_path / "other")]
    callback = ModelCheckpoint()
    trainer = trainer_with(tmp_path / "root", callback, logger=loggers, log_every_n_steps=1)
    trainer.fit(TinyModel(), batches(2))
    directory = tmp_path / "logs" / "run" / expected / "checkpoints"
    assert callback.dirpath == str(directory)
    assert names(directory) == ["epoch=0-step=2.ckpt"]


class NoSaveDir(L.Logger):
    """A logger that keeps nothing on disk, so checkpoints go under the trainer's root directory."""

    @property
    def name(self) -> str:
        return "run"

    @property
    def version(self) -> int:
        return 1

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        del metrics, step

    def log_hyperparams(self, params: Any) -> None:
        del params


def test_directory_fallbacks(tmp_path: Path) -> None:
    no_save_dir = ModelCheckpoint()
    trainer_with(tmp_path, no_save_dir, logger=NoSaveDir(), log_every_n_steps=1).fit(TinyModel(), batches(2))
    assert no_save_dir.dirpath == os.path.join(str(tmp_path), "run", "version_1", "checkpoints")
    assert names(Path(no_save_dir.dirpath)) == ["epoch=0-step=2.ckpt"]
    no_logger = ModelCheckpoint()
    trainer_with(tmp_path / "b", no_logger).fit(TinyModel(), batches(2))
    assert no_logger.dirpath == os.path.join(str(tmp_path / "b"), "checkpoints")
    explicit = ModelCheckpoint(dirpath=tmp_path / "mine")
    trainer_with(tmp_path / "c", explicit, logger=NoSaveDir(), log_every_n_steps=1).fit(TinyModel(), batches(2))
    assert explicit.dirpath == os.path.realpath(tmp_path / "mine")
    assert names(tmp_path / "mine") == ["epoch=0-step=2.ckpt"]


# ---------------------------------------------------------------- ModelCheckpoint: top-k


def test_top_k_min_keeps_best_and_deletes_evicted(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, monitor="val_loss", save_top_k=2, filename="{epoch}")
    trainer_with(tmp_path, callback, max_epochs=4).fit(Scripted("val_loss", (3.0, 2.0, 4.0, 1.0)), batches(2))
    assert names(directory) == ["epoch=1.ckpt", "epoch=3.ckpt"]
    assert callback.best_model_path == str(directory / "epoch=3.ckpt")
    assert callback.best_model_score == pytest.approx(1.0)
    assert callback.kth_best_model_path == str(directory / "epoch=1.ckpt")
    assert float(callback.kth_value) == pytest.approx(2.0)
    assert {Path(p).name: float(v) for p, v in callback.best_k_models.items()} == {
        "epoch=1.ckpt": 2.0,
        "epoch=3.ckpt": 1.0,
    }
    assert callback.current_score == pytest.approx(1.0)
    assert step_of(directory / "epoch=3.ckpt") == 8


def test_top_k_max_and_nan_ranks_worst(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, monitor="acc", mode="max", save_top_k=2, filename="{epoch}")
    model = Scripted("acc", (float("nan"), 0.5, 0.7, 0.6))
    trainer_with(tmp_path, callback, max_epochs=4).fit(model, batches(2))
    # The NaN epoch was stored as -inf, so the first better value evicted it.
    assert names(directory) == ["epoch=2.ckpt", "epoch=3.ckpt"]
    assert callback.best_model_path == str(directory / "epoch=2.ckpt")
    assert callback.best_model_score == pytest.approx(0.7)


def test_no_monitor_top_1_keeps_newest_and_minus_1_keeps_all(tmp_path: Path) -> None:
    newest_dir, all_dir = tmp_path / "newest", tmp_path / "all"
    newest, keep_all = ModelCheckpoint(dirpath=newest_dir), ModelCheckpoint(dirpath=all_dir, save_top_k=-1)
    trainer_with(tmp_path, newest, keep_all, max_epochs=3).fit(TinyModel(), batches(2))
    assert names(newest_dir) == ["epoch=2-step=6.ckpt"]
    assert newest.best_model_path == str(newest_dir / "epoch=2-step=6.ckpt")
    assert names(all_dir) == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt"]


def test_save_top_k_zero_saves_nothing_but_last_at_train_end(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, save_top_k=0, save_last=True)
    listing = Listing(directory, "on_train_epoch_start")
    trainer_with(tmp_path, listing, callback, max_epochs=2).fit(TinyModel(), batches(2))
    assert listing.seen == {"on_train_epoch_start@0": [], "on_train_epoch_start@2": []}
    assert names(directory) == ["last.ckpt"]
    assert callback.last_model_path == str(directory / "last.ckpt")
    assert step_of(directory / "last.ckpt") == 4


def test_evicted_files_are_deleted_through_fsspec_urls(tmp_path: Path) -> None:
    root = "memory://ckpt-test-urls"
    callback = ModelCheckpoint(dirpath=root, monitor="loss", filename="{epoch}")
    trainer_with(tmp_path, callback, max_epochs=2).fit(Scripted("loss", (2.0, 1.0)), batches(2))
    fs = fsspec.filesystem("memory")
    assert not fs.exists(f"{root}/epoch=0.ckpt")
    assert fs.exists(f"{root}/epoch=1.ckpt")
    assert callback.best_model_path == f"{root}/epoch=1.ckpt"
    assert step_of(callback.best_model_path) == 4
    fs.rm(root, recursive=True)


def test_the_checkpoint_a_fit_resumed_from_is_never_deleted(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    trainer_with(tmp_path, ModelCheckpoint(dirpath=directory)).fit(TinyModel(), batches(2))
    assert names(directory) == ["epoch=0-step=2.ckpt"]
    # Top-1 would replace the restored best file, but a run never deletes the file it resumed from.
    resumed = trainer_with(tmp_path, ModelCheckpoint(dirpath=directory), max_epochs=3)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        resumed.fit(TinyModel(), batches(2), ckpt_path=directory / "epoch=0-step=2.ckpt")
    assert names(directory) == ["epoch=0-step=2.ckpt", "epoch=2-step=6.ckpt"]


# ---------------------------------------------------------------- ModelCheckpoint: last


def test_save_last_follows_each_save_and_versions_an_old_last(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "last.ckpt").write_text("{}")
    callback = ModelCheckpoint(dirpath=directory, save_last=True)
    listing = Listing(directory, "on_train_epoch_start")
    with pytest.warns(UserWarning, match="exists and is not empty"):
        trainer_with(tmp_path, listing, callback, max_epochs=2).fit(TinyModel(), batches(2))
    # After the first epoch's save, the last file already exists (next to the user's own last.ckpt).
    assert listing.seen["on_train_epoch_start@2"] == ["epoch=0-step=2.ckpt", "last-v1.ckpt", "last.ckpt"]
    assert names(directory) == ["epoch=1-step=4.ckpt", "last-v1.ckpt", "last.ckpt"]
    assert callback.last_model_path == str(directory / "last-v1.ckpt")
    assert step_of(directory / "last-v1.ckpt") == 4
    assert (directory / "last.ckpt").read_text() == "{}"


def test_save_last_link_points_at_latest_save(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, save_last="link")
    trainer_with(tmp_path, callback, max_epochs=2).fit(TinyModel(), batches(2))
    last = directory / "last.ckpt"
    assert last.is_symlink()
    assert os.readlink(last) == "epoch=1-step=4.ckpt"
    assert step_of(last) == 4
    assert names(directory) == ["epoch=1-step=4.ckpt", "last.ckpt"]


def test_save_last_without_top_k_save_waits_for_train_end(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, save_last=True, every_n_epochs=2)
    listing = Listing(directory, "on_train_end")
    trainer_with(tmp_path, listing, callback).fit(TinyModel(), batches(2))
    assert listing.seen == {"on_train_end@2": []}
    assert names(directory) == ["last.ckpt"]
    assert step_of(directory / "last.ckpt") == 2


# ---------------------------------------------------------------- ModelCheckpoint: triggers


def test_every_n_train_steps(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, every_n_train_steps=2, save_top_k=-1)
    trainer_with(tmp_path, callback).fit(TinyModel(), batches(5))
    assert names(directory) == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]


def test_accumulating_batches_save_once_per_optimizer_step(tmp_path: Path) -> None:
    # Two batches per step repeat each global_step: one save per step, no "-v1" twin.
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, every_n_train_steps=1, save_top_k=-1)
    trainer_with(tmp_path, callback, accumulate_grad_batches=2).fit(TinyModel(), batches(4))
    assert names(directory) == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt"]


def test_zero_train_time_interval_saves_every_batch(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, train_time_interval=timedelta(0), save_top_k=-1)
    trainer_with(tmp_path, callback).fit(TinyModel(), batches(2))
    assert names(directory) == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt"]


def test_missing_monitor_defers_step_save_to_validation_end(tmp_path: Path) -> None:
    # Validation after every 2 of 4 batches; at step 2 val_loss does not exist yet, so the save waits for it.
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(
        dirpath=directory, monitor="val_loss", every_n_train_steps=2, save_top_k=-1, filename="{step}"
    )
    listing = Listing(directory, "on_validation_start", "on_train_batch_start")
    model = Scripted(val_values=(0.5, 0.25))
    trainer_with(tmp_path, listing, callback, val_check_interval=0.5).fit(model, batches(4), batches(2))
    assert listing.seen["on_validation_start@2"] == []
    assert listing.seen["on_train_batch_start@2"] == ["step=2.ckpt"]
    assert {Path(p).name: float(v) for p, v in callback.best_k_models.items()} == {
        "step=2.ckpt": 0.5,
        "step=4.ckpt": 0.25,
    }


def test_stale_monitor_on_last_batch_waits_for_fresh_validation(tmp_path: Path) -> None:
    # At step 4, val_loss still holds epoch 0's 9.0; the save waits for epoch 1's validation (0.25).
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(
        dirpath=directory, monitor="val_loss", every_n_train_steps=2, save_on_train_epoch_end=False, filename="{step}"
    )
    model = Scripted(val_values=(9.0, 0.25))
    trainer_with(tmp_path, callback, max_epochs=2).fit(model, batches(2), batches(2))
    assert callback.best_model_score == pytest.approx(0.25)
    assert names(directory) == ["step=4.ckpt"]


def test_save_point_follows_validation_when_it_runs_mid_epoch(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, monitor="val_loss", save_top_k=-1, filename="{epoch}-{step}")
    model = Scripted(val_values=(1.0, 0.5))
    trainer_with(tmp_path, callback, val_check_interval=0.5).fit(model, batches(2), batches(2))
    # One save per validation, none more at the end of the epoch.
    assert names(directory) == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt"]


@pytest.mark.parametrize(
    ("kwargs", "with_val", "stage"),
    [
        ({}, False, "train"),
        ({}, True, "train"),
        ({"val_check_interval": 0.5}, True, "validate"),
        ({"check_val_every_n_epoch": 2, "max_epochs": 2}, True, "validate"),
        ({"check_val_every_n_epoch": None, "val_check_interval": 2}, True, "validate"),
    ],
    ids=["no-validation", "validation-each-epoch", "mid-epoch", "every-2-epochs", "by-steps"],
)
def test_saves_at_train_epoch_end_only_when_validation_runs_once_per_epoch_or_never(
    tmp_path: Path, kwargs: dict[str, Any], with_val: bool, stage: str
) -> None:
    val = batches(1) if with_val else None
    for explicit, expected in ((None, stage), (stage == "validate", "train" if stage == "validate" else "validate")):
        if explicit is False and not with_val:
            continue  # without validation there is no validation end to save at
        stages = SaveStages()
        callback = ModelCheckpoint(dirpath=tmp_path / f"ckpt-{explicit}", save_on_train_epoch_end=explicit)
        trainer_with(tmp_path, stages, callback, **kwargs).fit(TinyModel(), batches(4), val)
        assert stages.stages and set(stages.stages) == {expected}, explicit


def test_missing_monitor_warns_in_training_and_raises_after_validation(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, monitor="val_loss")
    with pytest.warns(UserWarning, match="could not find the monitored key"):
        trainer_with(tmp_path, callback).fit(TinyModel(), batches(2))
    assert not directory.exists()
    # Saving after a validation that did not log the monitor is a configuration error.
    callback = ModelCheckpoint(dirpath=directory, monitor="val_loss", save_on_train_epoch_end=False)
    with pytest.raises(MisconfigurationException, match="'val_loss'.*train_loss"):
        trainer_with(tmp_path, callback).fit(Scripted(), batches(2), batches(1))


class FailsAtStep(TinyModel):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.fail_at = step

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == self.fail_at:
            raise Boom("training_step")
        return super().training_step(batch, batch_idx)


def test_never_saves_in_sanity_check(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, monitor="val_loss", save_last=True)
    listing = Listing(directory, "on_sanity_check_end")
    trainer = trainer_with(tmp_path, listing, callback, num_sanity_val_steps=1)
    trainer.fit(Scripted(val_values=(1.0,)), batches(2), batches(1))
    assert listing.seen == {"on_sanity_check_end@0": []}
    assert names(directory) == ["epoch=0-step=2.ckpt", "last.ckpt"]


def test_never_saves_outside_fit(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, monitor="val_loss", save_last=True, save_on_exception=True)
    trainer = trainer_with(tmp_path, callback)
    trainer.validate(Scripted(val_values=(1.0,)), batches(1), verbose=False)
    with pytest.raises(Boom):
        trainer.test(TinyModel(fail_in="test_step"), batches(1), verbose=False)
    assert not directory.exists()


def test_never_saves_in_fast_dev_run(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, save_last=True, save_on_exception=True)
    trainer_with(tmp_path, callback, fast_dev_run=2).fit(TinyModel(), batches(2))
    with pytest.raises(Boom):
        trainer_with(tmp_path, callback, fast_dev_run=2).fit(FailsAtStep(1), batches(2))
    assert not directory.exists()


class RecordingCSVLogger(L.CSVLogger):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notified: list[Any] = []

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self.notified.append(checkpoint_callback)


def test_on_exception_saves_the_template_name_and_notifies_loggers(tmp_path: Path) -> None:
    logger = RecordingCSVLogger(tmp_path / "logs")
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, save_on_exception=True, save_weights_only=True)
    trainer = trainer_with(tmp_path, callback, logger=logger, log_every_n_steps=1)
    with pytest.raises(Boom):
        trainer.fit(FailsAtStep(1), batches(2))
    assert names(directory) == ["epoch=0-step=1.ckpt"]
    saved = load_checkpoint(str(directory / "epoch=0-step=1.ckpt"))
    assert saved["global_step"] == 1 and "optimizer_states" not in saved
    assert logger.notified == [callback]

    default = ModelCheckpoint(dirpath=tmp_path / "off")
    assert default.save_on_exception is False
    with pytest.raises(Boom):
        trainer_with(tmp_path, default).fit(FailsAtStep(1), batches(2))
    assert not (tmp_path / "off").exists()


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
    directory = tmp_path / "ckpt"
    callback = ModelCheckpoint(dirpath=directory, monitor="loss", save_last=True)
    trainer = trainer_with(tmp_path, callback)
    trainer.fit(Scripted("loss", (0.5,)), batches(2))
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
    assert load_checkpoint(str(directory / "last.ckpt"))["callbacks"][callback.state_key]["best_model_path"] == str(
        directory / "epoch=0-step=2.ckpt"
    )
    restored = ModelCheckpoint(dirpath=directory, monitor="loss", save_last=True)
    restored.load_state_dict(state)
    assert restored.best_model_path == callback.best_model_path
    assert restored.best_k_models == callback.best_k_models
    assert restored.last_model_path == str(directory / "last.ckpt")

    moved = ModelCheckpoint(dirpath=tmp_path / "elsewhere", monitor="loss")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        moved.load_state_dict(state)
    assert moved.best_model_path == callback.best_model_path
    assert moved.best_k_models == {}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "mean"}, MisconfigurationException, "but got mean"),
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


def run_checks(tmp_path: Path, callback: EarlyStopping, values: list[float], key: str = "val_loss") -> int:
    """Fits with one logged value per epoch and no validation; returns how many epochs ran."""
    trainer = trainer_with(tmp_path, callback, max_epochs=len(values))
    trainer.fit(Scripted(key, tuple(values)), batches(2))
    return trainer.current_epoch


def test_early_stopping_patience(tmp_path: Path) -> None:
    callback = EarlyStopping("val_loss", patience=2)
    assert run_checks(tmp_path, callback, [1.0, 0.9, 0.95, 0.92, 0.5]) == 4
    assert callback.wait_count == 2
    assert callback.stopped_epoch == 3
    assert callback.best_score == pytest.approx(0.9)
    assert callback.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert "did not improve in the last 2 records" in (callback.stopping_reason_message or "")


def test_early_stopping_min_delta_and_max_mode(tmp_path: Path) -> None:
    callback = EarlyStopping("acc", mode="max", min_delta=0.1, patience=2)
    # +0.05 is within min_delta, so it does not reset the wait.
    assert run_checks(tmp_path, callback, [0.5, 0.55, 0.58, 0.9], key="acc") == 3
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
    callback = EarlyStopping("val_loss", patience=10, **kwargs)
    assert run_checks(tmp_path, callback, values) == 2
    assert callback.stopping_reason is reason


def test_early_stopping_ignores_nan_without_check_finite(tmp_path: Path) -> None:
    callback = EarlyStopping("val_loss", patience=10, check_finite=False)
    assert run_checks(tmp_path, callback, [0.5, float("nan"), 0.4]) == 3
    assert callback.best_score == pytest.approx(0.4)
    assert callback.stopping_reason is EarlyStoppingReason.NOT_STOPPED


def test_early_stopping_missing_metric(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="`val_loss` which is not available.*`other`"):
        run_checks(tmp_path, EarlyStopping("val_loss"), [1.0], key="other")
    lenient = EarlyStopping("val_loss", strict=False)
    assert run_checks(tmp_path, lenient, [1.0, 1.0, 1.0, 1.0], key="other") == 4
    assert lenient.wait_count == 0 and lenient.stopping_reason is EarlyStoppingReason.NOT_STOPPED


def test_early_stopping_checks_after_each_validation_but_not_the_sanity_check(tmp_path: Path) -> None:
    # Validation runs twice per epoch and logs 1.0 each time: with patience 0 the second run stops training.
    # Had the sanity check counted, the first real validation would already have stopped it (at step 1);
    # had the end of the epoch counted as well, wait_count would have grown past 1.
    callback = EarlyStopping("val_loss", patience=0)
    trainer = trainer_with(tmp_path, callback, max_epochs=5, val_check_interval=0.5, num_sanity_val_steps=1)
    trainer.fit(Scripted(val_values=(1.0, 1.0, 1.0)), batches(2), batches(1))
    assert (trainer.global_step, trainer.current_epoch) == (2, 1)
    assert callback.best_score == pytest.approx(1.0)
    assert callback.wait_count == 1 and callback.stopped_epoch == 0


def test_early_stopping_state(tmp_path: Path) -> None:
    callback = EarlyStopping("val_loss", mode="max")
    assert callback.state_key == "EarlyStopping{'monitor': 'val_loss', 'mode': 'max'}"
    run_checks(tmp_path, callback, [0.5, 0.4])
    state = callback.state_dict()
    assert set(state) == {
        "wait_count",
        "stopped_epoch",
        "best_score",
        "patience",
        "stopping_reason",
        "stopping_reason_message",
    }
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


class Ticking(TinyModel):
    """Moves the timer's clock forward by scripted amounts in each training and validation step."""

    def __init__(self, clock: FakeClock, train: tuple[float, ...] = (), val: float = 0.0) -> None:
        super().__init__()
        self.clock, self.train_ticks, self.val_tick = clock, train, val
        self.steps = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.clock.now += self.train_ticks[self.steps] if self.steps < len(self.train_ticks) else 0.0
        self.steps += 1
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.clock.now += self.val_tick


def test_timer_stops_after_duration_per_step(tmp_path: Path, timer_clock: FakeClock) -> None:
    callback = Timer(duration="00:00:01:00", verbose=False)
    trainer = trainer_with(tmp_path, callback, max_epochs=10)
    trainer.fit(Ticking(timer_clock, train=(59.0, 1.0, 5.0)), batches(4))
    assert trainer.global_step == 2  # 59 s after the first step, 60 s after the second: stop there
    assert callback.time_remaining() == pytest.approx(0.0)
    timer_clock.now += 100
    assert callback.time_elapsed("train") == pytest.approx(60.0)
    assert callback.start_time("train") == 1000.0 and callback.end_time("train") == 1060.0


def test_timer_epoch_interval_and_other_stages(tmp_path: Path, timer_clock: FakeClock) -> None:
    callback = Timer(duration={"seconds": 10}, interval="epoch")
    trainer = trainer_with(tmp_path, callback, max_epochs=5)
    trainer.fit(Ticking(timer_clock, train=(20.0,), val=3.0), batches(3), batches(1))
    # Over time after the first step, but the check is once per epoch: the epoch finishes, no second one.
    assert (trainer.global_step, trainer.current_epoch) == (3, 1)
    assert callback.time_elapsed("validate") == pytest.approx(3.0)
    assert callback.time_elapsed("test") == 0.0 and callback.start_time("test") is None
    assert Timer().time_remaining() is None
    with pytest.raises(ValueError, match="'predict'"):
        callback.time_elapsed("predict")
    with pytest.raises(MisconfigurationException, match="'batch'"):
        Timer(interval="batch")


def test_timer_state_resumes_the_clock(tmp_path: Path, timer_clock: FakeClock) -> None:
    first = Timer(duration=timedelta(seconds=100))
    trainer = trainer_with(tmp_path, first)
    trainer.fit(Ticking(timer_clock, train=(40.0,)), batches(1))
    trainer.save_checkpoint(tmp_path / "40s.ckpt")
    state = load_checkpoint(str(tmp_path / "40s.ckpt"))["callbacks"][first.state_key]
    assert state == {"time_elapsed": {"train": 40.0, "validate": 0.0, "test": 0.0}}

    resumed = Timer(duration=timedelta(seconds=100))
    trainer = trainer_with(tmp_path, resumed, max_epochs=10)
    trainer.fit(Ticking(timer_clock, train=(50.0, 10.0, 5.0)), batches(4), ckpt_path=tmp_path / "40s.ckpt")
    assert trainer.global_step == 1 + 2  # 40 s restored, then 50 s and 10 s
    assert resumed.time_elapsed() == pytest.approx(100.0)

    depleted = Timer(duration=timedelta(seconds=30))
    trainer = trainer_with(tmp_path, depleted, max_epochs=10)
    trainer.fit(Ticking(timer_clock), batches(4), ckpt_path=tmp_path / "40s.ckpt")
    assert trainer.global_step == 1  # out of time before the first batch


class StopAtFitStart(L.Callback):
    def on_fit_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        trainer.should_stop = True


def test_timer_never_clears_should_stop_and_without_duration_never_sets_it(tmp_path: Path) -> None:
    trainer = trainer_with(tmp_path, StopAtFitStart(), Timer(duration=timedelta(days=1)), max_epochs=3)
    trainer.fit(TinyModel(), batches(2))
    assert trainer.global_step == 0
    trainer = trainer_with(tmp_path, Timer(), max_epochs=3)
    trainer.fit(TinyModel(), batches(2))
    assert (trainer.global_step, trainer.current_epoch) == (6, 3)
