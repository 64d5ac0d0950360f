"""Libraries built on Lightning, run unchanged through `statemachine.as_lightning`: darts (which imports
`pytorch_lightning`) and pytorch-forecasting (`lightning.pytorch`, `lightning.fabric`).

The expected values were observed by running the same scripts with `--real-lightning` (the alias off): darts under
the pytorch-lightning 2.5.2 it pins, pytorch-forecasting under lightning 2.6.6, both with torch 2.13.0 on CPU. The
numbers match to the printed digits: the runs are the same computation. The forecasting model's error depends on
the CPU's kernels in its last digits (2.82344 on an AMD EPYC, 2.82355 on an Intel Xeon, under either trainer), so
that test runs the script under Lightning too, on the machine it runs on, and compares."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

SCRIPTS = REPO / "tests" / "scripts"


def _report(script: str, work: Path, real_lightning: bool = False) -> dict[str, Any]:
    """The script's JSON report, run through the alias (or, with `real_lightning`, under Lightning itself)."""
    work.mkdir(parents=True, exist_ok=True)
    flags = ["--real-lightning"] if real_lightning else []
    result = subprocess.run(
        [sys.executable, "-W", "default", str(SCRIPTS / script), str(work), *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stderr.count("LightningAliasWarning") == (0 if real_lightning else 1)
    return dict(json.loads(result.stdout.splitlines()[-1]))


DARTS_UNDER_LIGHTNING = {
    "BlockRNNModel": {
        "forecast": [0.15261, 0.16658, 0.17041, 0.16348, 0.14579, 0.1184],
        "checkpoints": ["best-epoch=1-val_loss=0.61.ckpt", "last-epoch=1.ckpt"],
    },
    "NBEATSModel": {
        "forecast": [0.18873, -2.69343, 0.57883, 0.13033, -0.5237, 0.0873],
        "checkpoints": ["best-epoch=1-val_loss=1.99.ckpt", "last-epoch=1.ckpt"],
    },
}


def test_darts_models_fit_checkpoint_reload_and_forecast_as_under_lightning(tmp_path: Path) -> None:
    report = _report("darts_fit.py", tmp_path)
    assert set(report) == set(DARTS_UNDER_LIGHTNING)
    for name, expected in DARTS_UNDER_LIGHTNING.items():
        run = report[name]
        assert run["trainer"] == "statemachine.trainer.Trainer"
        assert (run["epochs"], run["steps"]) == (2, 10)  # 2 epochs of 5 batches
        assert run["forecast"] == pytest.approx(expected["forecast"], abs=1e-4)
        assert run["checkpoints"] == expected["checkpoints"]
        # the last checkpoint and darts' own save file hold the fitted model; the best one loads and forecasts
        assert run["last_same"] and run["saved_same"] and run["best_finite"]


def test_pytorch_forecasting_trains_tunes_reloads_and_predicts_as_under_lightning(tmp_path: Path) -> None:
    report = _report("forecasting_fit.py", tmp_path / "ours")
    lightning = _report("forecasting_fit.py", tmp_path / "lightning", real_lightning=True)
    assert report["baseline_mae"] == lightning["baseline_mae"] == pytest.approx(0.18567, abs=1e-5)
    # Lightning 2.6.6 cannot run this finder on torch 2.13 (its restore refuses the checkpoint); ours runs it and
    # leaves the model as it was, so the fit below matches Lightning's fit without it.
    assert report["lr_find"] == {"points": 20, "suggested": True, "restored": True}
    tft = report["tft"]
    assert tft["trainer"] == "statemachine.trainer.Trainer"
    assert (tft["epochs"], tft["steps"]) == (2, 12)
    assert tft["best"] == "lightning_logs/version_0/checkpoints/epoch=1-step=12.ckpt"
    assert tft["metrics"] == [
        "lr-Adam",
        "train_loss",
        "train_loss_epoch",
        "train_loss_step",
        "val_MAE",
        "val_MAPE",
        "val_RMSE",
        "val_SMAPE",
        "val_loss",
    ]
    assert lightning["tft"]["trainer"] == "lightning.pytorch.trainer.trainer.Trainer"
    # The fit, its checkpoints, metrics and predictions are Lightning's on this machine, to the printed digits.
    assert {**tft, "trainer": None} == {**lightning["tft"], "trainer": None}
    assert tft["raw"] == [
        "decoder_attention",
        "decoder_lengths",
        "decoder_variables",
        "encoder_attention",
        "encoder_lengths",
        "encoder_variables",
        "prediction",
        "static_variables",
    ]
    assert "static_variables" in tft["interpretation"] and "attention" in tft["interpretation"]
    assert report["deepar"] == lightning["deepar"] == {"steps": 4, "shape": [4, 4]}
