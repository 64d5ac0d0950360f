"""CometLogger in Comet's offline mode: each run's archive (the zip comet_ml writes) is read back.

The expected metric names, steps, epochs, parameters, experiment name and key, and the crash record are what
Lightning 2.6.6's CometLogger leaves in the archive after the same fit (there with the offline mode chosen through
COMET_START_ONLINE=false, because Lightning's own `online=False` switches the experiment off and writes nothing)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import statemachine as L
from stages.loggers.logger import NoExperiment
from stages.rank_zero import rank_zero_only
from statemachine.engine.diagram import flow_artifacts
from statemachine.engine.history import HistoryDump, check_path
from statemachine.loggers import CometLogger, CSVLogger
from tests.conftest import COMET_QUICK, REPO, TinyModel, make_loader

SCRIPT = REPO / "tests" / "scripts" / "comet_fit.py"
HARD_TIMEOUT = 120  # seconds; a hang fails the test instead of the suite
COMET_SETTINGS = (
    "COMET_API_KEY",
    "COMET_WORKSPACE",
    "COMET_PROJECT_NAME",
    "COMET_EXPERIMENT_KEY",
    "COMET_START_MODE",
    "COMET_START_ONLINE",
    "COMET_START_EXPERIMENT_NAME",
    "COMET_OFFLINE_DIRECTORY",
)
# what the trainer sends for the fit in comet_fit.py: 2 epochs of 4 batches, every 2 steps, validation per epoch
TRAIN_STEPS = [(1, 0), (3, 0), (5, 1), (7, 1)]
VAL_STEPS = [(3, 0), (7, 1)]
HPARAMS = {"lr": 0.1, "optimizer|name": "sgd", "optimizer|momentum": 0.0}


@dataclass
class Archive:
    """One offline experiment as comet_ml zipped it: experiment.json, messages.json (one JSON message a line)
    and the files the messages point to."""

    experiment: dict[str, Any]
    messages: list[tuple[str, dict[str, Any]]]
    members: dict[str, bytes]

    def series(self, metric: str) -> list[tuple[int | None, int | None]]:
        """(step, epoch) of every value of `metric`, in logging order."""
        return [(m["step"], m["epoch"]) for m in self._metrics() if m["metricName"] == metric]

    def values(self, metric: str) -> list[float]:
        return [m["metricValue"] for m in self._metrics() if m["metricName"] == metric]

    def metric_names(self) -> set[str]:
        return {m["metricName"] for m in self._metrics()}

    def params(self) -> dict[str, Any]:
        """The parameters the logger sent (Comet's own bookkeeping, such as curr_step, is "auto-logged")."""
        params = [payload.get("param") or payload["params"] for kind, payload in self._of("parameter_msg")]
        return {p["paramName"]: p["paramValue"] for p in params if p["source"] == "manual"}

    def others(self, key: str) -> list[Any]:
        return [payload["value"] for _, payload in self._of("log_other") if payload["key"] == key]

    def graphs(self) -> list[str]:
        return [payload["graph"] for _, payload in self._of("graph")]

    def assets(self) -> list[tuple[str, int | None, bytes]]:
        """(file name, step, content) of every asset, in logging order."""
        uploads = [payload for _, payload in self._of("file_upload") if payload["upload_type"] == "asset"]
        return [
            (up["additional_params"]["fileName"], up["additional_params"]["step"], self.members[up["file_path"]])
            for up in uploads
        ]

    def _of(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(k, payload) for k, payload in self.messages if k == kind]

    def _metrics(self) -> list[dict[str, Any]]:
        return [payload["metric"] for _, payload in self._of("metric_msg")]


def read_archive(directory: Path) -> Archive:
    """The one archive in `directory` (one experiment per fit: a second zip fails the test)."""
    zips = sorted(directory.glob("*.zip"))
    assert len(zips) == 1, f"expected one offline archive in {directory}, found {[z.name for z in zips]}"
    with zipfile.ZipFile(zips[0]) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    lines = members["messages.json"].decode().splitlines()
    messages = [(message["type"], message["payload"]) for message in map(json.loads, lines)]
    return Archive(json.loads(members["experiment.json"]), messages, members)


def ended_archive(logger: CometLogger) -> Archive:
    """Comet writes the archive when the experiment ends: at exit, or here, as a user ending it by hand."""
    logger.experiment.end()
    assert logger.save_dir is not None
    return read_archive(Path(logger.save_dir))


def flow_of(archive: Archive) -> tuple[HistoryDump, dict[str, bytes]]:
    """The last run's state history and its overlay diagram, from the experiment's assets."""
    latest: dict[str, bytes] = {}
    for name, _, content in archive.assets():
        latest[name] = content
    dump = HistoryDump.model_validate_json(latest["state-history.json"])
    return dump, {name: content for name, content in latest.items() if name.startswith("state-")}


def assert_flow_matches(archive: Archive) -> HistoryDump:
    """The history asset is a legal path through the table, and the diagram asset is its overlay (SVG, or DOT
    without Graphviz), byte for byte."""
    dump, files = flow_of(archive)
    assert check_path(dump.records) == []
    assert files == flow_artifacts(dump)
    return dump


@pytest.fixture(scope="module", autouse=True)
def _no_error_reports() -> Iterator[None]:
    # comet_ml reports its own errors to Sentry from the moment it is imported; tests stay off the network
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COMET_ERROR_TRACKING_ENABLE", "false")
        yield


@pytest.fixture(autouse=True)
def _clean_comet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No Comet settings from the machine, and no experiment left running for the next test to reuse."""
    for name in COMET_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COMET_DISABLE_AUTO_LOGGING", "1")
    yield
    if "comet_ml" in sys.modules:
        sys.modules["comet_ml"].end()


def offline_logger(directory: Path, **options: Any) -> CometLogger:
    return CometLogger(online=False, offline_directory=str(directory), **(COMET_QUICK | options))


def quiet_trainer(tmp_path: Path, logger: Any, **options: Any) -> L.Trainer:
    settings: dict[str, Any] = {
        "max_epochs": 2,
        "logger": logger,
        "log_every_n_steps": 2,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
    }
    return L.Trainer(**(settings | options))


class Model(TinyModel):
    """The model of tests/scripts/comet_fit.py: hyperparameters saved, a nested one among them."""

    def __init__(self, lr: float = 0.1, optimizer: dict[str, Any] | None = None, fail_at_step: int = -1) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()


def _csv_values(log_dir: str, metric: str) -> list[float]:
    with open(Path(log_dir) / "metrics.csv", newline="") as f:
        return [float(row[metric]) for row in csv.DictReader(f) if row[metric]]


def test_fit_and_test_log_lightnings_steps_into_one_experiment_left_open(tmp_path: Path) -> None:
    logger = offline_logger(tmp_path / "comet", project="tiny-project", name="tiny-run")
    csv_logger = CSVLogger(tmp_path, name="csv")
    trainer = quiet_trainer(tmp_path, [logger, csv_logger])
    model = Model(optimizer={"name": "sgd", "momentum": 0.0})
    trainer.fit(model, make_loader(), make_loader())
    trainer.test(model, make_loader())
    # finalize only flushed: the experiment still takes data after the runs
    assert not logger.experiment.ended
    logger.log_metrics({"after": 1.0})
    archive = ended_archive(logger)

    assert archive.experiment["offline_id"] == logger.version
    assert archive.experiment["project_name"] == logger.name == "tiny-project"
    assert archive.others("Name") == ["tiny-run"]
    assert archive.experiment["customer_error_reported"] is False
    assert archive.experiment["customer_error_message"] is None

    assert archive.series("train_loss") == TRAIN_STEPS
    assert archive.series("val_loss") == VAL_STEPS
    # test logs at the step and epoch the fit ended on; a metric without a step takes the experiment's current one
    assert archive.series("test_acc") == [(8, 2)]
    assert archive.series("after") == [(8, 2)]
    assert archive.metric_names() == {"train_loss", "val_loss", "test_acc", "after"}
    # the values are the ones every logger received: the CSV logger of the same trainer has them too
    for metric in ("train_loss", "val_loss", "test_acc"):
        assert archive.values(metric) == _csv_values(csv_logger.log_dir, metric)
    assert archive.params() == HPARAMS | {"fail_at_step": -1}
    assert archive.graphs() == ["Model(\n  (layer): Linear(in_features=4, out_features=2, bias=True)\n)"]
    assert set(archive.others("Created from")) == {"statemachine-trainer"}

    # each run sends its flow as it ends, at its last step: the fit's path ends on its way to `finished`
    histories = [(step, content) for name, step, content in archive.assets() if name == "state-history.json"]
    assert [step for step, _ in histories] == [7, 8]
    fit_path = HistoryDump.model_validate_json(histories[0][1]).records
    assert fit_path[-1].transition is not None and "-> finished" in fit_path[-1].transition
    test_run_end = assert_flow_matches(archive).records[-1].transition
    assert test_run_end is not None and "testing -> finished" in test_run_end


# --- a user's script, in its own process: Comet writes the archive, and records a crash, at exit ---


def _script_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in COMET_SETTINGS}
    return env | {"COMET_ERROR_TRACKING_ENABLE": "false", "PYTHONUNBUFFERED": "1"}


def _run_script(out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), str(out), *flags]
    return subprocess.run(command, cwd=REPO, env=_script_env(), capture_output=True, text=True, timeout=HARD_TIMEOUT)


def test_exception_leaving_the_script_is_recorded_as_the_experiments_crash(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "--fail")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Boom: failed at step 5" in result.stderr
    archive = read_archive(tmp_path / "comet")

    assert json.loads((tmp_path / "rank0.json").read_text()) == {
        "name": "tiny-project",
        "version": archive.experiment["offline_id"],
        "save_dir": str(tmp_path / "comet"),
        "experiment": "OfflineExperiment",
    }
    assert archive.experiment["customer_error_reported"] is True
    assert archive.experiment["customer_error_message"] == (
        "Unexpected error detected in the user script: Boom('failed at step 5')"
    )
    assert archive.others("Name") == ["tiny-run"]
    # everything logged before the failure is there, nothing after it
    assert archive.series("train_loss") == TRAIN_STEPS[:2]
    assert archive.series("val_loss") == VAL_STEPS[:1]
    assert archive.params() == HPARAMS | {"fail_at_step": 5}
    assert archive.others("trained_on_rank") == []

    # the flow shows where it stopped
    last = assert_flow_matches(archive).records[-1]
    assert (last.trigger, last.source, last.global_step) == ("interrupt", "fitting.training", 5)
    assert last.exception is not None
    assert (last.exception.type, last.exception.message) == ("Boom", "failed at step 5")


def test_ddp_only_rank_zero_logs_and_other_ranks_get_an_experiment_that_does_nothing(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "--ddp")
    assert result.returncode == 0, result.stderr[-3000:]
    archive = read_archive(tmp_path / "comet")
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())

    assert rank0["version"] == archive.experiment["offline_id"]
    assert rank0["experiment"] == "OfflineExperiment"
    assert rank1 == {
        "name": "tiny-project",
        "version": None,
        "save_dir": str(tmp_path / "comet"),
        "experiment": "NoExperiment",
    }
    assert archive.experiment["customer_error_reported"] is False
    # each rank sees 2 of the 4 batches an epoch: steps 1 and 3, logged once
    assert archive.series("train_loss") == [(1, 0), (3, 1)]
    assert archive.series("val_loss") == [(1, 0), (3, 1)]
    # the model's on_train_end logs through logger.experiment on both ranks
    assert archive.others("trained_on_rank") == [0]
    assert archive.params() == HPARAMS | {"fail_at_step": -1}
    assert [name for name, _, _ in archive.assets()].count("state-history.json") == 1


# --- in this process: the logger's own calls ---


def test_log_metrics_takes_epoch_out_and_flattens_nesting(tmp_path: Path) -> None:
    logger = offline_logger(tmp_path, name="direct")
    logger.log_metrics({"loss": torch.tensor(0.25), "epoch": 3}, step=10)
    logger.log_metrics({"nested": {"inner": 2}})
    with pytest.raises(ValueError, match="'wide' is a tensor of shape \\(2,\\)"):
        logger.log_metrics({"wide": torch.zeros(2)}, step=11)
    archive = ended_archive(logger)

    assert archive.metric_names() == {"loss", "nested/inner"}
    assert (archive.series("loss"), archive.values("loss")) == ([(10, 3)], [0.25])
    # no step: Comet's current step and epoch, the ones set by the previous call
    assert (archive.series("nested/inner"), archive.values("nested/inner")) == ([(10, 3)], [2.0])
    assert archive.others("Name") == ["direct"]


@pytest.mark.parametrize(("prefix", "logged_as"), [("exp", "exp_loss"), ("", "loss"), (None, "loss")])
def test_prefix_is_joined_with_an_underscore(tmp_path: Path, prefix: str | None, logged_as: str) -> None:
    logger = offline_logger(tmp_path, prefix=prefix)
    logger.log_metrics({"loss": 0.5, "epoch": torch.tensor(1)}, step=4)
    archive = ended_archive(logger)
    assert archive.metric_names() == {logged_as}
    assert (archive.series(logged_as), archive.values(logged_as)) == ([(4, 1)], [0.5])


def test_hyperparameters_become_parameters_with_nested_keys_joined(tmp_path: Path) -> None:
    logger = offline_logger(tmp_path)
    logger.log_hyperparams(argparse.Namespace(lr=0.01, layers=[4, 2], optimizer={"name": "adam", "betas": {"b1": 0.9}}))
    logger.log_hyperparams({"batch_size": 16})
    assert ended_archive(logger).params() == {
        "lr": 0.01,
        "layers": [4, 2],
        "optimizer|name": "adam",
        "optimizer|betas|b1": 0.9,
        "batch_size": 16,
    }


def test_comets_environment_settings_fill_what_is_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMET_START_ONLINE", "false")
    monkeypatch.setenv("COMET_OFFLINE_DIRECTORY", str(tmp_path))
    monkeypatch.setenv("COMET_PROJECT_NAME", "from-env")
    monkeypatch.setenv("COMET_START_EXPERIMENT_NAME", "env-run")
    logger = CometLogger(**COMET_QUICK)
    assert (logger.save_dir, logger.name) == (str(tmp_path), "from-env")
    logger.log_metrics({"x": 1.0}, step=0)
    archive = ended_archive(logger)
    assert archive.experiment["project_name"] == "from-env"
    assert archive.others("Name") == ["env-run"]
    assert archive.series("x") == [(0, None)]


def test_a_given_experiment_key_is_the_version(tmp_path: Path) -> None:
    key = "0123456789abcdef" * 2
    logger = offline_logger(tmp_path, experiment_key=key, mode="create", tags=["tiny"])
    assert logger.version == key
    archive = ended_archive(logger)
    assert archive.experiment["offline_id"] == key
    assert archive.experiment["tags"] == ["tiny"]


def test_pickled_logger_reconnects_to_its_experiment_by_key(tmp_path: Path) -> None:
    logger = offline_logger(tmp_path, project="pickled")
    clone = pickle.loads(pickle.dumps(logger))
    assert clone.version is None  # no experiment travels; a spawned rank zero starts it on first use
    assert clone.name == "pickled"
    assert clone.experiment.get_key() == logger.version


def test_other_ranks_create_no_experiment_and_log_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = offline_logger(tmp_path / "comet", project="ranked")
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.log_graph(TinyModel())
    logger.log_flow_artifacts({"state-history.json": b"{}"})
    logger.finalize("success")
    assert isinstance(logger.experiment, NoExperiment)
    assert (logger.name, logger.version) == ("ranked", None)
    assert not (tmp_path / "comet").exists()


def test_finalize_refuses_an_unknown_status(tmp_path: Path) -> None:
    logger = offline_logger(tmp_path)
    with pytest.raises(ValueError, match="'done' is not one of 'success', 'failed', 'finished'"):
        logger.finalize("done")


# --- refusals ---


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"mode": "offline"},
            r"Unsupported experiment start mode: 'offline', you should use any of \['get_or_create', 'create', "
            r"'get'\].*online=False",
        ),
        ({"mode": "resume"}, "Unsupported experiment start mode: 'resume'"),
        ({"online": "false"}, "online 'false' must be True, False or None"),
        ({"online": 0}, "online 0 must be True, False or None"),
        ({"prefix": 3}, "prefix 3 must be a str or None"),
        ({"project": ["a"]}, r"project \['a'\] must be a str or None"),
        ({"experiment_name": "run"}, "`experiment_name` was renamed; pass name=... instead"),
        ({"project_name": "p"}, "`project_name` was renamed; pass project=... instead"),
        ({"save_dir": "logs"}, "`save_dir` was renamed; pass offline_directory=... instead"),
        ({"offline": True}, "`offline` was renamed; pass online=False instead"),
    ],
)
def test_bad_arguments_are_refused_before_any_experiment_starts(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CometLogger(offline_directory=str(tmp_path / "comet"), **options)
    assert not (tmp_path / "comet").exists()


def test_unknown_option_is_refused_with_the_options_comet_takes(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'log_codes'.*offline_directory.*tags"):
        CometLogger(online=False, offline_directory=str(tmp_path), log_codes=False)


def test_an_invalid_experiment_key_is_refused_by_comet(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'short' must be alphanumeric and between 32 and 50 characters"):
        offline_logger(tmp_path, experiment_key="short")


def test_online_without_an_api_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Comet.ml requires an API key"):
        CometLogger(offline_directory=str(tmp_path), **COMET_QUICK)


def test_missing_comet_ml_names_the_extra_to_install() -> None:
    code = """
import sys
sys.modules["comet_ml"] = None  # what an environment without comet_ml looks like to an import
from statemachine.loggers import CometLogger, CSVLogger
try:
    CometLogger(online=False)
except ModuleNotFoundError as err:
    print(err)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=HARD_TIMEOUT, check=False
    )
    assert result.returncode == 0, result.stderr
    assert 'CometLogger requires `comet_ml`, which is not installed: pip install "statemachine-trainer[comet]"' in (
        result.stdout
    )
