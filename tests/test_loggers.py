"""Loggers: directory layout and versions, TensorBoard event files read back, CSV files, refusals."""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from stages.loggers import CSVLogger, Logger, TensorBoardLogger
from stages.loggers.logger import flatten_hparams, metrics_to_floats
from stages.saving import load_hparams_from_yaml

if TYPE_CHECKING:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def _event_accumulator(log_dir: str) -> EventAccumulator:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(log_dir)
    accumulator.Reload()
    return accumulator


def _read_csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- shared helpers ---


def test_flatten_hparams_joins_nested_keys_and_accepts_namespaces() -> None:
    params = argparse.Namespace(lr=0.1, optim={"name": "adam", "betas": {"b1": 0.9}}, sub=argparse.Namespace(k=3))
    assert flatten_hparams(params) == {"lr": 0.1, "optim/name": "adam", "optim/betas/b1": 0.9, "sub/k": 3}
    with pytest.raises(ValueError, match="dict or an argparse.Namespace.*list"):
        flatten_hparams([1, 2])  # type: ignore[arg-type]


def test_metrics_to_floats_converts_tensors_and_refuses_non_scalars() -> None:
    assert metrics_to_floats({"a": torch.tensor(0.5), "b": 2, "c": torch.tensor([3.0])}) == {
        "a": 0.5,
        "b": 2.0,
        "c": 3.0,
    }
    with pytest.raises(ValueError, match="'bad'.*shape \\(2,\\)"):
        metrics_to_floats({"bad": torch.zeros(2)})
    with pytest.raises(ValueError, match="'word'.*'hello'"):
        metrics_to_floats({"word": "hello"})


def test_custom_logger_needs_only_name_version_and_the_two_log_methods() -> None:
    class Recorder(Logger):
        def __init__(self) -> None:
            self.saved = 0

        @property
        def name(self) -> str:
            return "rec"

        @property
        def version(self) -> int:
            return 0

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

        def log_hyperparams(self, params: object) -> None: ...

        def save(self) -> None:
            self.saved += 1

    logger = Recorder()
    assert (logger.save_dir, logger.root_dir, logger.log_dir, logger.experiment) == (None, None, None, None)
    logger.finalize("finished")
    assert logger.saved == 1
    with pytest.raises(ValueError, match="'done' is not one of 'success', 'failed', 'finished'"):
        logger.finalize("done")


def test_tensorboard_is_imported_when_the_logger_first_writes(tmp_path: Path) -> None:
    # tensorboard takes about a second to import: importing the package, building the logger and a Trainer with
    # it stay without it; the logger's first write brings it in
    code = f"""
import sys
import statemachine as L
from statemachine.loggers import TensorBoardLogger
logger = TensorBoardLogger({str(tmp_path)!r})
L.Trainer(logger=logger, default_root_dir={str(tmp_path)!r})
print("tensorboard" in sys.modules, end=" ")
logger.log_metrics({{"x": 1.0}}, step=0)
print("tensorboard" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False True"


# --- directories and versions (the same rules for both loggers) ---


@pytest.mark.parametrize("logger_cls", [TensorBoardLogger, CSVLogger])
def test_version_is_next_free_integer_computed_once(tmp_path: Path, logger_cls: type) -> None:
    root = tmp_path / "lightning_logs"
    for folder in ("version_0", "version_3", "version_x", "other"):
        (root / folder).mkdir(parents=True)
    (root / "version_9").write_text("a file, not a run")
    logger = logger_cls(tmp_path)
    assert logger.version == 4
    assert logger.log_dir == os.path.join(str(tmp_path), "lightning_logs", "version_4")
    (root / "version_4").mkdir()
    assert logger.version == 4  # fixed on first use, even once the folder exists
    assert logger.root_dir == str(root)
    assert logger.save_dir == str(tmp_path)


@pytest.mark.parametrize("logger_cls", [TensorBoardLogger, CSVLogger])
def test_explicit_versions_and_no_name_folder(tmp_path: Path, logger_cls: type) -> None:
    assert logger_cls(tmp_path, name="exp", version="run-a").log_dir == str(tmp_path / "exp" / "run-a")
    assert logger_cls(tmp_path, name="exp", version=7).log_dir == str(tmp_path / "exp" / "version_7")
    for no_name in (None, ""):
        logger = logger_cls(tmp_path, name=no_name)
        assert os.path.normpath(logger.root_dir) == str(tmp_path)  # CSVLogger's ends with "/", as in Lightning
        assert logger.log_dir == str(tmp_path / "version_0")
        assert logger.name == ""


@pytest.mark.parametrize("logger_cls", [TensorBoardLogger, CSVLogger])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"save_dir": 3}, "save_dir 3 must be a str"),
        ({"version": -1}, "version -1 must be a non-negative int"),
        ({"version": True}, "version True must be"),
        ({"version": ""}, "version '' is empty"),
        ({"name": 5}, "name 5 must be a str"),
        ({"prefix": None}, "prefix None must be a str"),
    ],
)
def test_bad_directory_arguments_are_refused(
    tmp_path: Path, logger_cls: type, kwargs: dict[str, object], message: str
) -> None:
    arguments: dict[str, object] = {"save_dir": tmp_path, **kwargs}
    with pytest.raises(ValueError, match=message):
        logger_cls(**arguments)


def test_tensorboard_refuses_a_url_save_dir(tmp_path: Path) -> None:
    # CSVLogger takes fsspec URLs: tests/test_checkpoint_csv_api.py
    with pytest.raises(ValueError, match="'s3://bucket/logs' is a URL"):
        TensorBoardLogger("s3://bucket/logs")


# --- TensorBoard ---


def test_tensorboard_scalars_are_readable_by_tensorboard(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, name="tb")
    assert not os.path.exists(logger.log_dir)  # the writer is created on first use
    logger.log_metrics({"loss": torch.tensor(0.5), "acc": 0.25}, step=3)
    logger.log_metrics({"loss": 0.125}, step=10)
    logger.save()
    events = _event_accumulator(logger.log_dir)
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(3, 0.5), (10, 0.125)]
    assert [(e.step, e.value) for e in events.Scalars("acc")] == [(3, 0.25)]


def test_tensorboard_writes_in_the_callers_thread_and_the_writers_add_methods_work(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    threads = set(threading.enumerate())
    writer = logger.experiment  # users call the SummaryWriter's own methods on it
    writer.add_histogram("weights", torch.randn(100), 1)
    writer.add_image("picture", torch.rand(3, 4, 4), 1)
    logger.log_metrics({"loss": 0.5}, step=1)
    logger.save()
    assert set(threading.enumerate()) - threads == set()  # no writer thread: a flush writes the records itself
    events = _event_accumulator(logger.log_dir)  # read while the writer is open: what save() flushed is there
    assert events.Tags()["histograms"] == ["weights"] and events.Tags()["images"] == ["picture"]
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 0.5)]
    assert len(list(Path(logger.log_dir).glob("events.out.tfevents.*"))) == 1
    logger.finalize("success")


def test_tensorboard_prefix_and_sub_dir(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, version=2, prefix="fold1", sub_dir="train")
    assert logger.log_dir == str(tmp_path / "lightning_logs" / "version_2" / "train")
    logger.log_metrics({"loss": 1.5}, step=0)
    logger.finalize("success")
    events = _event_accumulator(logger.log_dir)
    assert events.Tags()["scalars"] == ["fold1-loss"]


def test_tensorboard_logs_again_after_finalize(tmp_path: Path) -> None:
    # fit finalizes the logger, then trainer.test() reuses it
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.finalize("success")
    logger.log_metrics({"test_loss": 2.0}, step=1)
    logger.finalize("success")
    events = _event_accumulator(logger.log_dir)
    assert [e.value for e in events.Scalars("loss")] == [1.0]
    assert [e.value for e in events.Scalars("test_loss")] == [2.0]


def _hparams_plugin(log_dir: str) -> tuple[dict[str, object], list[str]]:
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = _event_accumulator(log_dir).PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    values: dict[str, object] = {}
    for key, value in start.session_start_info.hparams.items():
        values[key] = getattr(value, value.WhichOneof("kind"))
    return values, [info.name.tag for info in experiment.experiment.metric_infos]


def test_tensorboard_hyperparams_with_default_hp_metric(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams(
        argparse.Namespace(lr=0.01, optim={"name": "adam", "betas": (0.9, 0.99)}, frozen=True, scale=torch.tensor(2))
    )
    logger.finalize("success")
    values, metric_tags = _hparams_plugin(logger.log_dir)
    assert values == {
        "lr": 0.01,
        "optim/name": "adam",
        "optim/betas": "(0.9, 0.99)",
        "frozen": True,
        "scale": 2.0,
    }
    assert metric_tags == ["hp_metric"]
    assert [(e.step, e.value) for e in _event_accumulator(logger.log_dir).Scalars("hp_metric")] == [(0, -1.0)]


def test_tensorboard_hyperparams_with_given_metrics_and_without_default(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, version=0, prefix="p")
    logger.log_hyperparams({"lr": 0.1}, metrics=0.75)
    logger.finalize("success")
    _, metric_tags = _hparams_plugin(logger.log_dir)
    assert metric_tags == ["p-hp_metric"]  # the plugin's metric names match the prefixed scalar tags
    assert [e.value for e in _event_accumulator(logger.log_dir).Scalars("p-hp_metric")] == [0.75]

    quiet = TensorBoardLogger(tmp_path, version=1, default_hp_metric=False)
    quiet.log_hyperparams({"lr": 0.1})
    quiet.finalize("success")
    values, metric_tags = _hparams_plugin(quiet.log_dir)
    assert values == {"lr": 0.1} and metric_tags == []
    assert _event_accumulator(quiet.log_dir).Tags()["scalars"] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"log_graph": "yes"}, "log_graph 'yes' must be a bool"),
        ({"default_hp_metric": 1}, "default_hp_metric 1 must be a bool"),
        ({"sub_dir": 4}, "sub_dir 4 must be"),
    ],
)
def test_tensorboard_refuses_unsupported_arguments(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TensorBoardLogger(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_tensorboard_finalize_refuses_unknown_status(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'ok' is not one of"):
        TensorBoardLogger(tmp_path).finalize("ok")


# --- CSV ---


def test_csv_metrics_file_grows_columns_and_keeps_earlier_rows(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"train_loss": torch.tensor(0.5)}, step=0)
    logger.log_metrics({"train_loss": 0.25}, step=1)
    logger.save()
    path = os.path.join(logger.log_dir, "metrics.csv")
    assert _read_csv(path) == [{"step": "0", "train_loss": "0.5"}, {"step": "1", "train_loss": "0.25"}]

    logger.log_metrics({"val_loss": 0.75, "epoch": 0}, step=1)
    logger.save()
    with open(path) as f:
        assert f.readline().strip() == "epoch,step,train_loss,val_loss"
    assert _read_csv(path) == [
        {"step": "0", "epoch": "", "train_loss": "0.5", "val_loss": ""},
        {"step": "1", "epoch": "", "train_loss": "0.25", "val_loss": ""},
        {"step": "1", "epoch": "0", "train_loss": "", "val_loss": "0.75"},
    ]

    logger.log_metrics({"train_loss": 0.125}, step=2)  # no new key: appended under the same header
    logger.finalize("success")
    assert _read_csv(path)[-1] == {"step": "2", "epoch": "", "train_loss": "0.125", "val_loss": ""}
    assert sorted(os.listdir(logger.log_dir)) == ["metrics.csv"]  # no temporary files left behind


def test_csv_appends_rows_under_an_unchanged_header(tmp_path: Path) -> None:
    """A save with no new key appends to the same file (`tail -f metrics.csv` keeps following it) instead of
    rewriting it, so a long run's saves cost their new rows only."""
    logger = CSVLogger(tmp_path)
    path = os.path.join(logger.log_dir, "metrics.csv")
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.save()
    with open(path, newline="") as follower:
        assert follower.read() == "loss,step\r\n1.0,0\r\n"
        inode = os.stat(path).st_ino
        for step in range(1, 4):
            logger.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
            logger.save()
            assert follower.read() == f"{1.0 / (step + 1)},{step}\r\n"  # exactly the new row, at the end
    assert os.stat(path).st_ino == inode
    assert [row["loss"] for row in _read_csv(path)] == ["1.0", "0.5", "0.3333333333333333", "0.25"]


def test_csv_flushes_every_n_steps(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=3)
    path = os.path.join(logger.log_dir, "metrics.csv")
    logger.log_metrics({"a": 1.0}, step=0)
    logger.log_metrics({"a": 2.0}, step=1)
    assert not os.path.exists(path)
    logger.log_metrics({"a": 3.0}, step=2)
    assert [row["a"] for row in _read_csv(path)] == ["1.0", "2.0", "3.0"]


def test_csv_prefix_and_missing_step(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, prefix="test")
    logger.log_metrics({"acc": 0.5})
    logger.log_metrics({"acc": 0.75})
    logger.save()
    assert _read_csv(os.path.join(logger.log_dir, "metrics.csv")) == [
        {"step": "0", "test-acc": "0.5"},
        {"step": "1", "test-acc": "0.75"},
    ]


def test_csv_hparams_yaml_keeps_nesting_and_merges_calls(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams(argparse.Namespace(lr=0.1, net={"widths": (4, 8)}))
    logger.log_hyperparams({"batch_size": 32})
    saved = load_hparams_from_yaml(os.path.join(logger.log_dir, "hparams.yaml"))
    assert saved == {"lr": 0.1, "net": {"widths": [4, 8]}, "batch_size": 32}  # OmegaConf writes tuples as lists
    assert not os.path.exists(os.path.join(logger.log_dir, "hparams.json"))


def test_csv_existing_metrics_file_is_replaced_with_a_warning(tmp_path: Path) -> None:
    log_dir = tmp_path / "lightning_logs" / "version_0"
    log_dir.mkdir(parents=True)
    (log_dir / "metrics.csv").write_text("step,old\n0,1\n")
    logger = CSVLogger(tmp_path, version=0)
    with pytest.warns(UserWarning, match="exists and is not empty. Previous log files"):
        logger.log_metrics({"new": 2.0}, step=5)
    logger.save()
    assert _read_csv(str(log_dir / "metrics.csv")) == [{"step": "5", "new": "2.0"}]


@pytest.mark.parametrize("every", [0, -5, 2.5, True])
def test_csv_refuses_bad_flush_interval(tmp_path: Path, every: object) -> None:
    with pytest.raises(ValueError, match=f"flush_logs_every_n_steps {every!r} must be an int >= 1"):
        CSVLogger(tmp_path, flush_logs_every_n_steps=every)  # type: ignore[arg-type]
