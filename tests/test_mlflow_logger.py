"""MLFlowLogger against a real `mlflow server` (sqlite store, proxied artifacts), read back through MlflowClient.

The expected step numbers, params, tags and artifact layout are what Lightning 2.6.6's MLFlowLogger leaves on the
same server after the same fit."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from mlflow import MlflowClient
from mlflow.entities import Run
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L
from statemachine.callbacks import ModelCheckpoint
from statemachine.engine.history import HistoryDump
from statemachine.loggers import CSVLogger, MLFlowLogger
from tests.conftest import REPO


class Regressor(L.LightningModule):
    """Logs a step-and-epoch training loss and a validation loss; raises `failure` at global step 3."""

    def __init__(self, lr: float = 0.1, hidden: int = 4, failure: type[BaseException] | None = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["failure"])
        self.failure = failure
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.failure is not None and self.global_step == 3:
            raise self.failure("stopped at step 3")
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(8, 3, generator=torch.Generator().manual_seed(0))), batch_size=2)


def _trainer(tmp_path: Path, logger: Any, **options: Any) -> L.Trainer:
    settings: dict[str, Any] = {
        "max_epochs": 2,
        "logger": logger,
        "log_every_n_steps": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
        "callbacks": [ModelCheckpoint(monitor="val_loss")],
    }
    return L.Trainer(**(settings | options))


def _logger(uri: str, **options: Any) -> MLFlowLogger:
    settings: dict[str, Any] = {"experiment_name": f"exp-{uuid.uuid4().hex[:8]}", "tracking_uri": uri}
    return MLFlowLogger(**(settings | options))


def _run(uri: str, logger: MLFlowLogger) -> Run:
    assert logger.run_id is not None
    return MlflowClient(uri).get_run(logger.run_id)


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key)]


def _steps(uri: str, run_id: str, key: str) -> list[int]:
    return [step for step, _ in _history(uri, run_id, key)]


def _artifacts(uri: str, run_id: str, path: str | None = None) -> list[str]:
    found: list[str] = []
    for item in MlflowClient(uri).list_artifacts(run_id, path):
        found += _artifacts(uri, run_id, item.path) if item.is_dir else [item.path]
    return sorted(found)


def _read_artifact(uri: str, run_id: str, path: str, tmp_path: Path) -> bytes:
    local = MlflowClient(uri).download_artifacts(run_id, path, str(tmp_path / uuid.uuid4().hex))
    return Path(local).read_bytes()


def test_a_fit_leaves_lightnings_metrics_steps_params_tags_and_checkpoint_on_the_server(
    mlflow_server: str, tmp_path: Path
) -> None:
    logger = _logger(mlflow_server, run_name="first", tags={"team": "vision"}, log_model=True)
    trainer = _trainer(tmp_path, logger)
    trainer.fit(Regressor(), _loader(), _loader())

    run = _run(mlflow_server, logger)
    run_id = run.info.run_id
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    assert run.data.params == {"lr": "0.1", "hidden": "4"}
    assert run.data.tags["team"] == "vision" and run.data.tags["mlflow.runName"] == "first"
    assert run.data.tags["mlflow.source.type"] == "LOCAL"  # MLflow's own context tags, resolved as Lightning does
    # 4 batches per epoch, logged every step; epoch-level values at the epoch's last step (3, 7)
    assert _steps(mlflow_server, run_id, "train_loss_step") == list(range(8))
    assert _steps(mlflow_server, run_id, "train_loss_epoch") == [3, 7]
    assert _steps(mlflow_server, run_id, "val_loss") == [3, 7]
    epoch = _history(mlflow_server, run_id, "epoch")
    assert [step for step, _ in epoch] == [0, 1, 2, 3, 3, 3, 4, 5, 6, 7, 7, 7]
    assert [value for _, value in epoch] == [0.0] * 6 + [1.0] * 6
    assert (logger.name, logger.version, logger.save_dir) == (run.info.experiment_id, run_id, None)

    # log_model=True: the best checkpoint is uploaded when the run ends, with its score and aliases
    best = Path(trainer.checkpoint_callback.best_model_path)
    folder = best.stem
    assert {f"{folder}/{best.name}", f"{folder}/aliases.txt", f"{folder}/metadata.yaml"} <= set(
        _artifacts(mlflow_server, run_id)
    )
    assert _read_artifact(mlflow_server, run_id, f"{folder}/{best.name}", tmp_path) == best.read_bytes()
    aliases = ast.literal_eval(_read_artifact(mlflow_server, run_id, f"{folder}/aliases.txt", tmp_path).decode())
    assert aliases == ["latest", "best"]
    metadata = yaml.safe_load(_read_artifact(mlflow_server, run_id, f"{folder}/metadata.yaml", tmp_path))
    assert metadata["score"] == pytest.approx(trainer.checkpoint_callback.best_model_score.item())
    assert metadata["original_filename"] == best.name
    assert metadata["Checkpoint"]["monitor"] == "val_loss" and metadata["Checkpoint"]["save_top_k"] == 1


def test_the_run_holds_the_flow_it_took_a_history_dump_and_the_overlay_diagram(
    mlflow_server: str, tmp_path: Path
) -> None:
    logger = _logger(mlflow_server)
    _trainer(tmp_path, logger).fit(Regressor(), _loader(), _loader())

    run_id = logger.run_id
    assert run_id is not None
    assert _artifacts(mlflow_server, run_id, "statemachine") == [
        "statemachine/state-history.json",
        "statemachine/state-overlay.svg",
        "statemachine/state-timeline.trace.json",
    ]
    dump = HistoryDump.model_validate_json(
        _read_artifact(mlflow_server, run_id, "statemachine/state-history.json", tmp_path)
    )
    assert dump.records[0].trigger == "fit"
    # taken while the last edge runs, before the trackers close: the stop edge, in flight
    assert dump.records[-1].transition == "epoch_boundary: fitting.between_epochs -> finished [fit_done]"
    svg = _read_artifact(mlflow_server, run_id, "statemachine/state-overlay.svg", tmp_path)
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg
    trace = json.loads(_read_artifact(mlflow_server, run_id, "statemachine/state-timeline.trace.json", tmp_path))
    slices = [event for event in trace["traceEvents"] if event["ph"] == "X"]
    assert {"fitting.training", "fitting.validating"} <= {event["name"] for event in slices}


@pytest.mark.parametrize(
    ("failure", "status"),
    [(RuntimeError, "FAILED"), (KeyboardInterrupt, "KILLED")],
    ids=["exception", "ctrl-c"],
)
def test_a_failed_run_ends_failed_or_killed_and_its_history_shows_where_it_stopped(
    mlflow_server: str, tmp_path: Path, failure: type[BaseException], status: str
) -> None:
    logger = _logger(mlflow_server)
    expected = SystemExit if failure is KeyboardInterrupt else failure  # Ctrl-C ends the program: SystemExit(1)
    with pytest.raises(expected) as raised:
        _trainer(tmp_path, logger).fit(Regressor(failure=failure), _loader(), _loader())
    cause = raised.value.__cause__ if expected is SystemExit else raised.value
    assert isinstance(cause, failure) and "stopped at step 3" in str(cause)

    run = _run(mlflow_server, logger)
    assert run.info.status == status
    assert _steps(mlflow_server, run.info.run_id, "train_loss_step") == [0, 1, 2]
    raw = _read_artifact(mlflow_server, run.info.run_id, "statemachine/state-history.json", tmp_path)
    last = HistoryDump.model_validate_json(raw).records[-1]
    assert last.trigger == "interrupt" and last.source == "fitting.training"
    assert last.exception is not None and last.exception.type == failure.__name__


def test_log_model_all_uploads_every_checkpoint_as_it_is_saved(mlflow_server: str, tmp_path: Path) -> None:
    uploaded: list[list[str]] = []

    class Uploads(L.Callback):
        """After each epoch's save, what the server holds."""

        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            uploaded.append([path for path in _artifacts(mlflow_server, logger.run_id) if path.endswith(".ckpt")])

    logger = _logger(mlflow_server, log_model="all")
    every_epoch = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, filename="{epoch}")
    _trainer(tmp_path, logger, callbacks=[every_epoch, Uploads()]).fit(Regressor(), _loader(), _loader())

    # the checkpoint callback saves after Uploads ran, so each epoch sees the saves before it
    assert uploaded == [[], ["epoch=0/epoch=0.ckpt"]]
    final = [path for path in _artifacts(mlflow_server, logger.run_id) if path.endswith(".ckpt")]
    assert final == ["epoch=0/epoch=0.ckpt", "epoch=1/epoch=1.ckpt"]


def test_checkpoint_path_prefix_puts_the_checkpoints_under_it(mlflow_server: str, tmp_path: Path) -> None:
    logger = _logger(mlflow_server, log_model=True, checkpoint_path_prefix="models/regressor")
    trainer = _trainer(tmp_path, logger)
    trainer.fit(Regressor(), _loader(), _loader())

    best = Path(trainer.checkpoint_callback.best_model_path)
    assert f"models/regressor/{best.stem}/{best.name}" in _artifacts(mlflow_server, logger.run_id, "models")


def test_fit_then_test_log_to_one_run(mlflow_server: str, tmp_path: Path) -> None:
    logger = _logger(mlflow_server)
    trainer = _trainer(tmp_path, logger)
    model = Regressor()
    trainer.fit(model, _loader(), _loader())
    trainer.test(model, _loader())

    client = MlflowClient(mlflow_server)
    runs = client.search_runs([logger.experiment_id])
    assert [run.info.run_id for run in runs] == [logger.run_id]
    assert _steps(mlflow_server, logger.run_id, "test_loss") == [8]
    assert runs[0].info.status == "FINISHED"


def test_several_loggers_at_once_each_get_every_metric(mlflow_server: str, tmp_path: Path) -> None:
    tracker = _logger(mlflow_server)
    csv = CSVLogger(tmp_path / "csv")
    trainer = _trainer(tmp_path, [tracker, csv])
    trainer.fit(Regressor(), _loader(), _loader())

    assert trainer.loggers == [tracker, csv]
    assert _steps(mlflow_server, tracker.run_id, "val_loss") == [3, 7]
    rows = (Path(csv.log_dir) / "metrics.csv").read_text().splitlines()
    assert "step" in rows[0].split(",") and "val_loss" in rows[0]


def test_the_tracking_uri_comes_from_mlflow_tracking_uri_else_a_local_store(
    mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    from_environment = MLFlowLogger(experiment_name=f"env-{uuid.uuid4().hex[:8]}")
    from_environment.log_metrics({"seen": 1.0}, step=5)
    assert _history(mlflow_server, from_environment.run_id, "seen") == [(5, 1.0)]

    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    # MLflow 3 keeps its file store only on request
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (tmp_path / "mlruns").as_posix()
    local = MLFlowLogger(save_dir=store)
    assert local.save_dir == store
    local.log_hyperparams({"optimizer": {"name": "sgd", "lr": 0.5}})
    assert MlflowClient(f"file:{store}").get_run(local.run_id).data.params == {
        "optimizer/name": "sgd",
        "optimizer/lr": "0.5",
    }


def test_an_existing_run_id_is_continued(mlflow_server: str) -> None:
    first = _logger(mlflow_server)
    first.log_metrics({"loss": 2.0}, step=0)
    again = MLFlowLogger(tracking_uri=mlflow_server, run_id=first.run_id)
    again.log_metrics({"loss": 1.0}, step=1)
    assert again.experiment_id == first.experiment_id
    assert _history(mlflow_server, first.run_id, "loss") == [(0, 2.0), (1, 1.0)]


def test_metric_names_lose_what_mlflow_refuses_with_a_warning_and_strings_are_dropped(mlflow_server: str) -> None:
    logger = _logger(mlflow_server, prefix="train")
    with pytest.warns(RuntimeWarning, match="Replacing train-loss@top<1> with train-losstop1"):
        logger.log_metrics({"loss@top<1>": 0.5, "note": "text"}, step=2)
    run = _run(mlflow_server, logger)
    assert run.data.metrics == {"train-losstop1": 0.5}


def test_long_parameter_values_are_cut_to_250_characters_and_many_params_are_sent(mlflow_server: str) -> None:
    logger = _logger(mlflow_server)
    logger.log_hyperparams({"text": "x" * 300, **{f"p{index}": index for index in range(150)}})
    params = _run(mlflow_server, logger).data.params
    assert params["text"] == "x" * 250 and len(params) == 151


def test_only_rank_zero_creates_a_run_and_logs_under_ddp(mlflow_server: str, tmp_path: Path) -> None:
    name = f"ddp-{uuid.uuid4().hex[:8]}"
    logger = MLFlowLogger(experiment_name=name, tracking_uri=mlflow_server)
    trainer = _trainer(tmp_path, logger, accelerator="cpu", strategy="ddp_fork", devices=2, num_sanity_val_steps=0)
    trainer.fit(Regressor(), _loader(), _loader())

    client = MlflowClient(mlflow_server)
    [run] = client.search_runs([client.get_experiment_by_name(name).experiment_id])
    assert run.info.status == "FINISHED"
    # 8 samples over 2 ranks in batches of 2: 2 steps per epoch, each logged once
    assert _steps(mlflow_server, run.info.run_id, "train_loss_step") == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"log_model": 1}, "log_model 1 must be True, False or 'all'"),
        ({"log_model": "best"}, "log_model 'best' must be True, False or 'all'"),
        ({"tags": ["a"]}, "tags ['a'] must be a dict"),
        ({"synchronous": "yes"}, "synchronous 'yes' must be a bool or None"),
        ({"prefix": None}, "prefix None must be a str"),
        ({"checkpoint_path_prefix": 3}, "checkpoint_path_prefix 3 must be a str"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_allowed(
    mlflow_server: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        MLFlowLogger(tracking_uri=mlflow_server, **options)


def test_without_mlflow_installed_the_error_names_the_extra() -> None:
    script = (
        "import sys; sys.modules['mlflow'] = None\n"
        "from statemachine.loggers import MLFlowLogger\n"
        "try:\n    MLFlowLogger()\n"
        "except ModuleNotFoundError as err:\n    print(err)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 'pip install "statemachine-trainer[mlflow]"' in done.stdout


def test_the_history_artifact_is_what_the_trainer_dumps(mlflow_server: str, tmp_path: Path) -> None:
    logger = _logger(mlflow_server)
    trainer = _trainer(tmp_path, logger, max_epochs=1)
    trainer.fit(Regressor(), _loader(), _loader())
    raw = _read_artifact(mlflow_server, logger.run_id, "statemachine/state-history.json", tmp_path)
    uploaded = json.loads(raw)
    local = json.loads(Path(trainer.dump_history(os.fspath(tmp_path / "local.json"))).read_text())
    assert uploaded["table_digest"] == local["table_digest"]
    # the same records, up to the stop edge the upload was taken in
    assert [r["trigger"] for r in uploaded["records"]] == [r["trigger"] for r in local["records"]]
