"""Three trackers in one trainer (`logger=[...]`, as Lightning allows): each holds the whole run, at the same steps."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from conftest import COMET_QUICK, TinyModel, make_loader, quiet_trainer
from mlflow import MlflowClient
from test_comet_logger import ended_archive
from test_wandb_logger import end_wandb, offline_environment, only_run

from statemachine.loggers import CometLogger, MLFlowLogger, WandbLogger


def test_mlflow_wandb_and_comet_at_once_each_get_every_metric_and_the_flow(
    mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable, value in offline_environment(tmp_path).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("COMET_ERROR_TRACKING_ENABLE", "false")
    monkeypatch.chdir(tmp_path)
    mlflow = MLFlowLogger(experiment_name=f"together-{uuid.uuid4().hex[:8]}", tracking_uri=mlflow_server)
    wandb = WandbLogger(save_dir=tmp_path)
    comet = CometLogger(online=False, offline_directory=str(tmp_path / "comet"), **COMET_QUICK)
    trainer = quiet_trainer(tmp_path, logger=[mlflow, wandb, comet], max_epochs=2, log_every_n_steps=1)
    try:
        trainer.fit(TinyModel(), make_loader(), make_loader(seed=1))
        archive = ended_archive(comet)
    finally:
        end_wandb()
        if "comet_ml" in sys.modules:
            sys.modules["comet_ml"].end()

    assert trainer.loggers == [mlflow, wandb, comet]
    # 32 samples in batches of 8: 4 steps an epoch, train_loss at every step, val_loss at each epoch's end
    expected = {"train_loss": [0, 1, 2, 3, 4, 5, 6, 7], "val_loss": [3, 7]}
    client = MlflowClient(mlflow_server)
    rows = only_run(tmp_path).rows
    for metric, steps in expected.items():
        assert [m.step for m in client.get_metric_history(mlflow.run_id, metric)] == steps
        assert [row["trainer/global_step"] for row in rows if metric in row] == steps
        assert [step for step, _ in archive.series(metric)] == steps
    artifacts = {item.path for item in client.list_artifacts(mlflow.run_id, "statemachine")}
    assert "statemachine/state-history.json" in artifacts
    assert "state-history.json" in {name for name, _, _ in archive.assets()}
    assert list((tmp_path / "wandb").glob("offline-run-*/files/state-flow/*/state-history.json"))
