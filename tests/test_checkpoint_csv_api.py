"""ModelCheckpoint's and CSVLogger's public attributes, argument errors and files, as Lightning 2.6 shows them."""

from __future__ import annotations

import csv
import io
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fsspec
import pytest
import torch
import yaml
from conftest import quiet_trainer
from test_s3 import s3  # noqa: F401  (the moto S3 server fixture)

import statemachine as L
from statemachine.callbacks import ModelCheckpoint
from statemachine.demos import BoringModel
from statemachine.loggers import CSVLogger
from statemachine.loggers.csv_logs import ExperimentWriter
from statemachine.utilities.exceptions import MisconfigurationException


class ValLossModel(BoringModel):
    """BoringModel logging `val_loss`: `scores[epoch]` when given, else the batch's value."""

    def __init__(self, scores: list[float] | None = None) -> None:
        super().__init__()
        self.scores = scores

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().validation_step(batch, batch_idx)
        self.log("val_loss", self.scores[self.current_epoch] if self.scores else out["x"])
        return out


def fit(tmp_path: Path, callback: ModelCheckpoint, model: BoringModel | None = None, epochs: int = 3) -> L.Trainer:
    trainer = quiet_trainer(
        tmp_path,
        max_epochs=epochs,
        limit_train_batches=2,
        limit_val_batches=1,
        callbacks=[callback],
        enable_checkpointing=True,
    )
    trainer.fit(model or ValLossModel())
    return trainer


# ---- ModelCheckpoint: attributes ----


def test_checkpoint_attributes_before_a_fit() -> None:
    callback = ModelCheckpoint()
    assert (callback.CHECKPOINT_JOIN_CHAR, callback.CHECKPOINT_EQUALS_CHAR) == ("-", "=")
    assert (callback.CHECKPOINT_NAME_LAST, callback.FILE_EXTENSION, callback.STARTING_VERSION) == ("last", ".ckpt", 1)
    assert callback.dirpath is None and callback.filename is None and callback.monitor is None
    assert callback.save_last is None and callback.save_top_k == 1 and callback.mode == "min"
    assert callback.best_model_path == callback.kth_best_model_path == callback.last_model_path == ""
    assert callback.best_model_score is None and callback.current_score is None and callback.best_k_models == {}
    assert torch.equal(callback.kth_value, torch.tensor(torch.inf))
    assert torch.equal(ModelCheckpoint(mode="max").kth_value, torch.tensor(-torch.inf))
    assert callback.state_key == (
        "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1,"
        " 'train_time_interval': None}"
    )


@pytest.mark.parametrize(
    ("kwargs", "every_n_epochs", "every_n_train_steps"),
    [
        ({}, 1, 0),
        ({"every_n_train_steps": 3}, 0, 3),
        ({"train_time_interval": timedelta(seconds=5)}, 0, 0),
        ({"every_n_epochs": 2}, 2, 0),
        ({"every_n_epochs": 0}, 0, 0),
    ],
)
def test_every_n_epochs_reads_the_resolved_trigger(
    kwargs: dict[str, Any], every_n_epochs: int, every_n_train_steps: int
) -> None:
    callback = ModelCheckpoint(**kwargs)
    assert callback.every_n_epochs == every_n_epochs
    assert f"'every_n_train_steps': {every_n_train_steps}, 'every_n_epochs': {every_n_epochs}" in callback.state_key
    with pytest.raises(AttributeError):
        callback.every_n_epochs = 5  # type: ignore[misc]


def test_a_local_dirpath_is_made_absolute_and_a_url_stays_as_given(tmp_path: Path) -> None:
    assert ModelCheckpoint(dirpath="~/ckpts").dirpath == os.path.join(os.path.expanduser("~"), "ckpts")
    assert ModelCheckpoint(dirpath="s3://bucket/path").dirpath == "s3://bucket/path"
    assert ModelCheckpoint(dirpath="memory://path").dirpath == "memory://path"


def test_checkpoint_attributes_and_state_after_a_monitored_fit(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_top_k=2, save_last=True)
    fit(tmp_path, callback, ValLossModel([3.0, 1.0, 2.0]))
    directory = str(tmp_path / "ckpts")
    epoch1, epoch2 = os.path.join(directory, "epoch=1-step=4.ckpt"), os.path.join(directory, "epoch=2-step=6.ckpt")
    assert callback.best_k_models == {epoch1: torch.tensor(1.0), epoch2: torch.tensor(2.0)}
    assert (callback.best_model_path, callback.kth_best_model_path) == (epoch1, epoch2)
    assert (float(callback.best_model_score), float(callback.kth_value), float(callback.current_score)) == (1, 2, 2)
    assert callback.last_model_path == os.path.join(directory, "last.ckpt")
    assert sorted(os.listdir(directory)) == ["epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt", "last.ckpt"]

    state = callback.state_dict()
    assert list(state) == [
        *("monitor", "best_model_score", "best_model_path", "current_score", "dirpath", "best_k_models"),
        *("kth_best_model_path", "kth_value", "last_model_path"),
    ]
    assert state["dirpath"] == directory and state["best_model_path"] == epoch1
    saved = torch.load(callback.last_model_path, weights_only=False)["callbacks"]
    assert list(saved) == [callback.state_key] and saved[callback.state_key]["best_model_path"] == epoch1


def test_load_state_dict_reloads_everything_only_from_the_same_dirpath(tmp_path: Path) -> None:
    state = {"best_model_path": "best.ckpt", "best_model_score": torch.tensor(0.5), "last_model_path": "l.ckpt"}
    same = ModelCheckpoint(dirpath=tmp_path)
    same.load_state_dict({**state, "dirpath": str(tmp_path)})
    assert (same.best_model_path, float(same.best_model_score), same.last_model_path) == ("best.ckpt", 0.5, "l.ckpt")

    moved = ModelCheckpoint(dirpath=tmp_path)
    with pytest.warns(UserWarning, match="The dirpath has changed from '/elsewhere' to"):
        moved.load_state_dict({**state, "dirpath": "/elsewhere"})
    assert (moved.best_model_path, moved.best_model_score, moved.last_model_path) == ("best.ckpt", None, "")


# ---- ModelCheckpoint: argument errors ----


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"save_top_k": -2}, "Invalid value for save_top_k=-2. Must be >= -1"),
        (
            {"save_top_k": 2},
            "ModelCheckpoint(save_top_k=2, monitor=None) is not a valid configuration. No quantity for top_k to track.",
        ),
        ({"mode": "avg"}, "`mode` can be min, max but got avg"),
        ({"mode": "avg", "save_top_k": -5}, "`mode` can be min, max but got avg"),
        ({"every_n_train_steps": -1}, "Invalid value for every_n_train_steps=-1. Must be >= 0"),
        ({"every_n_epochs": -1}, "Invalid value for every_n_epochs=-1. Must be >= 0"),
        ({"save_top_k": -2, "every_n_epochs": -1}, "Invalid value for save_top_k=-2. Must be >= -1"),
        (
            {"every_n_train_steps": 2, "every_n_epochs": 3},
            "Combination of parameters every_n_train_steps=2, every_n_epochs=3 and train_time_interval=None should"
            " be mutually exclusive.",
        ),
        (
            {"every_n_train_steps": 2, "train_time_interval": timedelta(seconds=1)},
            "Combination of parameters every_n_train_steps=2, every_n_epochs=0 and train_time_interval=0:00:01"
            " should be mutually exclusive.",
        ),
        (
            {"every_n_epochs": 1, "train_time_interval": timedelta(0)},
            "Combination of parameters every_n_train_steps=0, every_n_epochs=1 and train_time_interval=0:00:00"
            " should be mutually exclusive.",
        ),
        ({"save_top_k": 1.5}, "Invalid value for save_top_k=1.5. Must be >= -1 and an int, got float"),
    ],
)
def test_argument_errors_carry_lightnings_words(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(MisconfigurationException) as raised:
        ModelCheckpoint(**kwargs)
    assert message in str(raised.value)


def test_disabled_triggers_are_not_a_conflict() -> None:
    assert ModelCheckpoint(every_n_train_steps=0, every_n_epochs=0).every_n_epochs == 0
    assert ModelCheckpoint(every_n_train_steps=0, every_n_epochs=2).every_n_epochs == 2


# ---- ModelCheckpoint: names, ranking, files ----


@pytest.mark.parametrize(
    ("init", "metrics", "kwargs", "name"),
    [
        ({}, {"epoch": torch.tensor(2), "step": torch.tensor(7)}, {}, "epoch=2-step=7.ckpt"),
        ({"filename": "{epoch}-{epoch_test}"}, {"epoch": 1, "epoch_test": 2}, {}, "epoch=1-epoch_test=2.ckpt"),
        (
            {"filename": "{epoch:03d}-{val/loss:.2f}"},
            {"epoch": 3, "val/loss": torch.tensor(0.12345)},
            {},
            "epoch=003-val/loss=0.12.ckpt",
        ),
        ({"filename": "{val.acc:.1f}"}, {"val.acc": 0.77}, {}, "val.acc=0.8.ckpt"),
        ({"filename": "e{epoch}", "auto_insert_metric_name": False}, {"epoch": 4}, {}, "e4.ckpt"),
        ({"filename": "{epoch}"}, {"epoch": 4}, {"ver": 3}, "epoch=4-v3.ckpt"),
        ({"filename": "{epoch}"}, {"epoch": 4}, {"prefix": "pre"}, "pre-epoch=4.ckpt"),
        ({"filename": "{epoch}"}, {"epoch": 4}, {"prefix": ""}, "-epoch=4.ckpt"),
        ({"filename": "{epoch}"}, {"epoch": 4}, {"filename": "{step}"}, "step=0.ckpt"),
        ({"filename": "{epoch} {step:>4}"}, {"epoch": 1, "step": torch.tensor(3)}, {}, "epoch=1 step=   3.ckpt"),
        ({"filename": "{v:.3e}"}, {"v": torch.tensor(12345.678)}, {}, "v=1.235e+04.ckpt"),
        ({"dirpath": "/tmp/d", "filename": "{epoch}"}, {"epoch": 1}, {}, "/tmp/d/epoch=1.ckpt"),
    ],
)
def test_format_checkpoint_name(
    init: dict[str, Any], metrics: dict[str, Any], kwargs: dict[str, Any], name: str
) -> None:
    assert ModelCheckpoint(**init).format_checkpoint_name(metrics, **kwargs) == name


def test_format_checkpoint_name_adds_missing_fields_to_the_metrics_as_zero() -> None:
    metrics: dict[str, Any] = {}
    assert ModelCheckpoint(filename="{missing:d}-{other}").format_checkpoint_name(metrics) == "missing=0-other=0.ckpt"
    assert metrics == {"missing": torch.tensor(0), "other": torch.tensor(0)}


def _one_process() -> Any:
    return SimpleNamespace(
        is_global_zero=True, strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all=True: decision)
    )


def test_check_monitor_top_k() -> None:
    trainer = _one_process()
    callback = ModelCheckpoint(monitor="x", save_top_k=2)
    assert callback.check_monitor_top_k(trainer, None) is False
    assert callback.check_monitor_top_k(trainer, torch.tensor(9.0)) is True  # fewer than k kept
    callback.best_k_models = {"a": torch.tensor(1.0), "b": torch.tensor(2.0)}
    callback.kth_best_model_path = "b"
    assert callback.check_monitor_top_k(trainer, torch.tensor(1.5)) is True
    assert callback.check_monitor_top_k(trainer, torch.tensor(2.5)) is False
    assert callback.check_monitor_top_k(trainer, torch.tensor(float("nan"))) is False
    maximising = ModelCheckpoint(monitor="x", save_top_k=2, mode="max")
    maximising.best_k_models, maximising.kth_best_model_path = {"a": torch.tensor(1.0), "b": torch.tensor(2.0)}, "a"
    assert maximising.check_monitor_top_k(trainer, torch.tensor(1.5)) is True
    assert maximising.check_monitor_top_k(trainer, torch.tensor(0.5)) is False
    assert ModelCheckpoint(monitor="x", save_top_k=-1).check_monitor_top_k(trainer, torch.tensor(9.0)) is True


def test_file_exists_asks_the_filesystem(tmp_path: Path) -> None:
    (tmp_path / "there.ckpt").write_bytes(b"x")
    callback = ModelCheckpoint(dirpath=tmp_path)
    assert callback.file_exists(tmp_path / "there.ckpt", _one_process()) is True
    assert callback.file_exists(str(tmp_path / "missing.ckpt"), _one_process()) is False


def test_to_yaml_writes_best_k_models_with_their_scores(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_top_k=-1)
    fit(tmp_path, callback, ValLossModel([0.5, 0.25, 0.75]))
    callback.to_yaml()
    written = yaml.safe_load((tmp_path / "ckpts" / "best_k_models.yaml").read_text())
    assert written == {path: float(score) for path, score in callback.best_k_models.items()}
    assert sorted(written.values()) == [0.25, 0.5, 0.75]
    callback.to_yaml(tmp_path / "elsewhere.yaml")
    assert yaml.safe_load((tmp_path / "elsewhere.yaml").read_text()) == written


def test_to_yaml_without_monitor_writes_an_empty_mapping(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts")
    fit(tmp_path, callback, epochs=1)
    callback.to_yaml()
    assert (tmp_path / "ckpts" / "best_k_models.yaml").read_text() == "{}\n"


def test_to_yaml_before_setup_needs_a_filepath() -> None:
    with pytest.raises(AssertionError, match="pass a filepath"):
        ModelCheckpoint().to_yaml()


# ---- ModelCheckpoint: save_last="link" ----


def _entries(directory: Path) -> dict[str, str]:
    """Each file of `directory`: the relative target of a symlink, or "file"."""
    return {p.name: os.readlink(p) if p.is_symlink() else "file" for p in sorted(directory.iterdir())}


def test_link_points_at_the_latest_save_by_a_relative_path(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last="link", every_n_train_steps=1, save_top_k=-1)
    fit(tmp_path, callback, epochs=2)
    entries = _entries(tmp_path / "ckpts")
    assert entries.pop("last.ckpt") == "epoch=1-step=4.ckpt"
    assert set(entries.values()) == {"file"} and len(entries) == 4
    assert callback.last_model_path == str(tmp_path / "ckpts" / "last.ckpt")


def test_link_keeps_pointing_at_the_best_when_later_epochs_are_worse(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last="link", monitor="val_loss")
    fit(tmp_path, callback, ValLossModel([3.0, 1.0, 2.0]))
    assert _entries(tmp_path / "ckpts") == {"epoch=1-step=4.ckpt": "file", "last.ckpt": "epoch=1-step=4.ckpt"}


def test_link_without_top_k_files_writes_last_as_a_file(tmp_path: Path) -> None:
    fit(tmp_path, ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last="link", save_top_k=0))
    assert _entries(tmp_path / "ckpts") == {"last.ckpt": "file"}
    assert torch.load(tmp_path / "ckpts" / "last.ckpt", weights_only=False)["global_step"] == 6


def test_link_to_a_save_named_last_takes_the_next_version(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last="link", filename="last")
    fit(tmp_path, callback)
    assert _entries(tmp_path / "ckpts") == {"last-v1.ckpt": "last.ckpt", "last.ckpt": "file"}
    assert callback.last_model_path.endswith("last-v1.ckpt") and callback.best_model_path.endswith("last.ckpt")


def test_link_on_a_remote_filesystem_is_refused(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=f"memory://{uuid.uuid4().hex}", save_last="link")
    with pytest.raises(ValueError) as raised:
        fit(tmp_path, callback)
    assert "`ModelCheckpoint(save_last='link')` is only supported for local file paths, got `dirpath=memory://" in str(
        raised.value
    )


# ---- CSVLogger ----


def test_csv_logger_directories(tmp_path: Path) -> None:
    logger = CSVLogger("logs")
    assert (logger.name, logger.version, logger.save_dir) == ("lightning_logs", 0, "logs")
    assert (logger.root_dir, logger.log_dir) == ("logs/lightning_logs", "logs/lightning_logs/version_0")
    assert CSVLogger("logs", name=None).root_dir == "logs/" and CSVLogger("logs", name="").log_dir == "logs/version_0"
    assert CSVLogger("logs", version="abc").log_dir == "logs/lightning_logs/abc"
    assert CSVLogger("logs", version=3).log_dir == "logs/lightning_logs/version_3"
    assert CSVLogger("~/runs", name="n").log_dir == "~/runs/n/version_0"  # kept as given, as in Lightning
    assert CSVLogger.LOGGER_JOIN_CHAR == "-"


def test_csv_experiment_writer_attributes(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    writer = logger.experiment
    assert isinstance(writer, ExperimentWriter)
    assert (writer.NAME_METRICS_FILE, writer.NAME_HPARAMS_FILE) == ("metrics.csv", "hparams.yaml")
    assert writer.log_dir == logger.log_dir and os.path.isdir(logger.log_dir)
    assert writer.metrics_file_path == os.path.join(logger.log_dir, "metrics.csv")
    assert (writer.metrics, writer.hparams) == ([], {})

    logger.log_metrics({"b": 1.0})
    logger.log_metrics({"a": torch.tensor(2.0)})
    # pending rows, each with its step (counted among the rows not saved yet, as Lightning counts)
    assert writer.metrics == [{"b": 1.0, "step": 0}, {"a": 2.0, "step": 1}]
    logger.save()
    assert writer.metrics == [] and writer.metrics_keys == ["a", "b", "step"]
    logger.log_metrics({"c": 3})
    logger.save()
    assert _text(writer.metrics_file_path) == "a,b,c,step\n,1.0,,0\n2.0,,,1\n,,3,0\n"


def test_csv_log_hyperparams_without_arguments_writes_an_empty_mapping(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams()
    hparams = os.path.join(logger.log_dir, "hparams.yaml")
    assert _text(hparams) == "{}\n" and logger.experiment.hparams == {}
    logger.log_hyperparams({"a": 1, "nested": {"b": [1, 2]}})
    assert yaml.safe_load(_text(hparams)) == {"a": 1, "nested": {"b": [1, 2]}}


class NewKeysMidRun(BoringModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().training_step(batch, batch_idx)
        self.log("zeta", float(batch_idx))
        if self.current_epoch >= 1:
            self.log("alpha", 1.0 + batch_idx)
        return out

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        out = super().validation_step(batch, batch_idx)
        self.log("val_x", 7.0)
        return out


# What Lightning 2.6 writes for this run: sorted columns with `step` among them, rows rewritten when `alpha` arrives.
NEW_KEYS_MID_RUN_CSV = """alpha,epoch,step,val_x,zeta
,0,0,,0.0
,0,1,,1.0
,0,2,,2.0
,0,2,7.0,
1.0,1,3,,0.0
2.0,1,4,,1.0
3.0,1,5,,2.0
,1,5,7.0,
"""


def _fit_new_keys_mid_run(tmp_path: Path, logger: CSVLogger) -> None:
    trainer = quiet_trainer(
        tmp_path, logger=logger, max_epochs=2, limit_train_batches=3, limit_val_batches=1, log_every_n_steps=1
    )
    trainer.fit(NewKeysMidRun())


def test_csv_metrics_of_a_fit_where_keys_arrive_mid_run(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=3)
    _fit_new_keys_mid_run(tmp_path, logger)
    assert _text(logger.experiment.metrics_file_path) == NEW_KEYS_MID_RUN_CSV
    assert sorted(os.listdir(logger.log_dir)) == ["metrics.csv"]  # no hyperparameters, no hparams.yaml


def test_csv_warns_with_lightnings_words_about_a_used_log_dir(tmp_path: Path) -> None:
    log_dir = tmp_path / "lightning_logs" / "version_0"
    log_dir.mkdir(parents=True)
    (log_dir / "hparams.yaml").write_text("old: 1\n")
    logger = CSVLogger(tmp_path, version=0)
    with pytest.warns(UserWarning, match="exists and is not empty. Previous log files in this directory will be"):
        logger.experiment  # noqa: B018


def _text(path: str) -> str:
    with fsspec.open(path, "r", newline="") as file:
        return str(file.read()).replace("\r\n", "\n")


@pytest.fixture
def memory_dir() -> Iterator[str]:
    root = f"memory://csv-{uuid.uuid4().hex}"
    yield root
    fsspec.filesystem("memory").rm(root, recursive=True)


def test_csv_logger_on_memory_fs_writes_lightnings_files(tmp_path: Path, memory_dir: str) -> None:
    fs = fsspec.filesystem("memory")
    fs.makedirs(f"{memory_dir}/lightning_logs/version_0")
    logger = CSVLogger(memory_dir, flush_logs_every_n_steps=3)
    assert logger.version == 1 and logger.log_dir == f"{memory_dir}/lightning_logs/version_1"
    logger.log_hyperparams({"lr": 0.1})
    _fit_new_keys_mid_run(tmp_path, logger)
    assert _text(f"{logger.log_dir}/metrics.csv") == NEW_KEYS_MID_RUN_CSV
    assert yaml.safe_load(_text(f"{logger.log_dir}/hparams.yaml")) == {"lr": 0.1}
    assert not any(".tmp" in path for path in fs.find(memory_dir))


def test_checkpoints_follow_a_csv_logger_onto_memory_fs(tmp_path: Path, memory_dir: str) -> None:
    logger = CSVLogger(memory_dir)
    callback = ModelCheckpoint()
    trainer = quiet_trainer(tmp_path, logger=logger, callbacks=[callback], enable_checkpointing=True)
    trainer.fit(BoringModel())
    assert callback.dirpath == f"{memory_dir}/lightning_logs/version_0/checkpoints"
    assert callback.best_model_path == f"{callback.dirpath}/epoch=0-step=64.ckpt"
    with fsspec.open(callback.best_model_path, "rb") as file:
        assert torch.load(io.BytesIO(file.read()), weights_only=False)["global_step"] == 64


@pytest.fixture
def s3_env(s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:  # noqa: F811
    """The moto server as the default S3 endpoint: CSVLogger, as in Lightning, takes no storage options."""
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["client_kwargs"]["endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # a filesystem cached earlier would keep its endpoint
    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def test_csv_logger_on_s3(s3_env: None) -> None:
    root = f"s3://runs/csv-{uuid.uuid4().hex}"
    logger = CSVLogger(root)
    assert logger.log_dir == f"{root}/lightning_logs/version_0"
    logger.log_hyperparams({"a": 1})
    for step, row in enumerate([{"x": 1.0}, {"x": 2.0}, {"y": 3.0}]):
        logger.log_metrics(row, step=step)
        logger.save()  # the second save appends, the third rewrites under a new header
    rows = list(csv.DictReader(io.StringIO(_text(f"{logger.log_dir}/metrics.csv"))))
    assert rows == [
        {"step": "0", "x": "1.0", "y": ""},
        {"step": "1", "x": "2.0", "y": ""},
        {"step": "2", "x": "", "y": "3.0"},
    ]
    assert _text(f"{logger.log_dir}/hparams.yaml") == "a: 1\n"
    assert CSVLogger(root).version == 1
