"""LightningCLI: configs and command lines build the same run as the equivalent Python call."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import REPO, TinyModel, make_loader

import statemachine as L
from statemachine.cli import LightningCLI, SaveConfigCallback, lazy_instance

DIGITS_CONFIG = REPO / "examples" / "digits.yaml"
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


class TinyData(L.LightningDataModule):
    def __init__(self, samples: int = 32, batch_size: int = 8) -> None:
        super().__init__()
        self.samples = samples
        self.batch_size = batch_size

    def train_dataloader(self) -> Any:
        return make_loader(self.samples, self.batch_size)

    def val_dataloader(self) -> Any:
        return make_loader(self.samples, self.batch_size, seed=1)

    def test_dataloader(self) -> Any:
        return make_loader(self.samples, self.batch_size, seed=2)


class WideModel(TinyModel):
    """A second model class, to choose with `--model.class_path`."""

    def __init__(self, width: int = 3, lr: float = 0.1) -> None:
        super().__init__(lr=lr)
        self.width = width


def _write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def digits_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example config names `examples.digits.*`, importable from the repository root."""
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(REPO))


def test_fit_from_the_example_config_gives_the_weights_of_the_python_call(tmp_path: Path, digits_on_path: None) -> None:
    from examples.digits import DigitsClassifier, DigitsData

    short = {"max_epochs": 2, "limit_train_batches": 5, "limit_val_batches": 2, "log_every_n_steps": 1}
    overrides = [f"--trainer.{key}={value}" for key, value in short.items()]
    cli = LightningCLI(
        args=["fit", "--config", str(DIGITS_CONFIG), *overrides, *QUIET, f"--trainer.default_root_dir={tmp_path}/cli"]
    )

    L.seed_everything(0)
    trainer = L.Trainer(
        **short,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path / "python",
        callbacks=[L.ModelCheckpoint(monitor="val_acc", mode="max")],
    )
    model = DigitsClassifier(hidden=128, lr=2e-3)
    trainer.fit(model, datamodule=DigitsData(batch_size=64))

    assert cli.trainer.global_step == trainer.global_step == 10
    cli_weights, python_weights = cli.model.state_dict(), model.state_dict()
    assert list(cli_weights) == list(python_weights)
    for name, value in python_weights.items():
        assert torch.equal(cli_weights[name], value), name

    saved = yaml.safe_load(Path(cli.trainer.log_dir, "config.yaml").read_text())
    assert saved["seed_everything"] == 0
    assert saved["model"]["class_path"] == "examples.digits.DigitsClassifier"
    assert saved["model"]["init_args"] == {"hidden": 128, "lr": 0.002}
    assert saved["trainer"]["max_epochs"] == 2
    assert saved["trainer"]["callbacks"][0]["init_args"]["monitor"] == "val_acc"


def test_several_configs_merge_in_order_and_the_command_line_wins(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.yaml", {"trainer": {"max_epochs": 4, "max_steps": 7}, "model": {"lr": 0.5}})
    second = _write(tmp_path / "b.yaml", {"trainer": {"max_epochs": 5}})
    cli = LightningCLI(
        TinyModel,
        TinyData,
        run=False,
        args=["--config", str(first), "--config", str(second), "--trainer.max_steps=9", "--data.batch_size=4"],
    )
    assert cli.subcommand is None
    assert cli.trainer.max_epochs == 5
    assert cli.trainer.max_steps == 9
    assert cli.model.hparams == {} and cli.config.model.lr == 0.5
    assert cli.datamodule.batch_size == 4
    assert isinstance(cli.trainer, L.Trainer)


def test_print_config_prints_the_resolved_config_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        LightningCLI(TinyModel, TinyData, args=["fit", "--trainer.max_epochs=3", "--model.lr=0.25", "--print_config"])
    assert stopped.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["max_epochs"] == 3
    assert printed["model"] == {"fail_in": None, "lr": 0.25}
    assert printed["data"] == {"samples": 32, "batch_size": 8}
    assert printed["ckpt_path"] is None


def test_init_arguments_are_typed_from_the_signature(capsys: pytest.CaptureFixture[str]) -> None:
    cli = LightningCLI(TinyModel, TinyData, run=False, args=["--model.lr=0.3", "--data.samples=16"])
    assert cli.config.model.lr == 0.3 and cli.datamodule.samples == 16
    with pytest.raises(SystemExit) as stopped:
        LightningCLI(TinyModel, TinyData, run=False, args=["--data.samples=many"])
    assert stopped.value.code == 2
    assert "samples" in capsys.readouterr().err


def test_subclass_mode_picks_the_class_from_class_path() -> None:
    cli = LightningCLI(
        TinyModel,
        TinyData,
        subclass_mode_model=True,
        run=False,
        args=["--model.class_path=test_cli.WideModel", "--model.init_args.width=5"],
    )
    assert type(cli.model).__name__ == "WideModel" and cli.model.width == 5


def test_trainer_callbacks_and_logger_arguments_parse(tmp_path: Path) -> None:
    callbacks = (
        '[{"class_path": "statemachine.ModelCheckpoint", "init_args": {"monitor": "val_loss", "save_top_k": 2, '
        '"mode": "max", "filename": "{epoch}-{val_loss:.2f}"}}, '
        '{"class_path": "EarlyStopping", "init_args": {"monitor": "val_loss", "patience": 4}}]'
    )
    logger = (
        f'[{{"class_path": "CSVLogger", "init_args": {{"save_dir": "{tmp_path}", "name": "csv"}}}}, '
        f'{{"class_path": "TensorBoardLogger", "init_args": {{"save_dir": "{tmp_path}", "default_hp_metric": false}}}}]'
    )
    profiler = '{"class_path": "statemachine.profilers.SimpleProfiler", "init_args": {"filename": "perf"}}'
    cli = LightningCLI(
        TinyModel,
        TinyData,
        run=False,
        save_config_callback=None,
        args=[f"--trainer.callbacks={callbacks}", f"--trainer.logger={logger}", f"--trainer.profiler={profiler}"],
    )
    checkpoint = cli.trainer.checkpoint_callback
    assert (checkpoint.monitor, checkpoint.save_top_k, checkpoint.mode) == ("val_loss", 2, "max")
    assert checkpoint.filename == "{epoch}-{val_loss:.2f}"
    assert cli.trainer.early_stopping_callback.patience == 4
    csv, tensorboard = cli.trainer.loggers
    assert isinstance(csv, L.CSVLogger) and csv.name == "csv" and csv.save_dir == str(tmp_path)
    assert isinstance(tensorboard, L.TensorBoardLogger) and tensorboard.save_dir == str(tmp_path)
    assert type(cli.trainer.profiler).__name__ == "SimpleProfiler" and cli.trainer.profiler.filename == "perf"
    cli = LightningCLI(TinyModel, TinyData, run=False, args=["--trainer.profiler=advanced"])
    assert type(cli.trainer.profiler).__name__ == "AdvancedProfiler"


def test_seed_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")  # both restored after the test: the CLI writes into them
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    cli = LightningCLI(TinyModel, TinyData, run=False, args=["--seed_everything=123"])
    assert torch.initial_seed() == 123 and cli.config.seed_everything == 123
    monkeypatch.delenv("PL_GLOBAL_SEED")  # set by the seed above, as it is for a launcher's processes
    with pytest.warns(UserWarning, match="No seed found, seed set to 0"):
        cli = LightningCLI(TinyModel, TinyData, run=False, args=[])  # default: true, Lightning's 0 written back
    assert cli.config.seed_everything == torch.initial_seed() == 0
    assert os.environ["PL_SEED_WORKERS"] == "1"  # the CLI seeds the loaders' workers too, as Lightning's does
    torch.manual_seed(5)
    LightningCLI(TinyModel, TinyData, run=False, args=["--seed_everything=false"])
    assert torch.initial_seed() == 5


def test_test_subcommand_with_ckpt_path_and_hooks_around_it(tmp_path: Path) -> None:
    model = TinyModel()
    trainer = L.Trainer(max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, logger=False)
    trainer.fit(model, make_loader())
    checkpoint = trainer.checkpoint_callback.best_model_path
    calls: list[str] = []

    class RecordingCLI(LightningCLI):
        def before_test(self) -> None:
            calls.append("before")

        def after_test(self) -> None:
            calls.append("after")

    cli = RecordingCLI(
        TinyModel,
        TinyData,
        args=[
            "test",
            f"--ckpt_path={checkpoint}",
            "--verbose=false",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
            *QUIET,
        ],
        save_config_callback=None,
    )
    assert calls == ["before", "after"]
    assert "test_acc" in cli.trainer.callback_metrics
    for name, value in model.state_dict().items():
        assert torch.equal(cli.model.state_dict()[name], value)


def test_trainer_defaults_and_config_file_overwrite_refusal(tmp_path: Path) -> None:
    args = ["fit", "--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--trainer.log_every_n_steps=1", *QUIET]
    args.append("--trainer.enable_checkpointing=false")
    # class instances as defaults are lazy: each CLI builds its own logger
    defaults = {"default_root_dir": str(tmp_path), "logger": lazy_instance(L.CSVLogger, save_dir=tmp_path, version=0)}
    timer = L.Timer()
    cli = LightningCLI(TinyModel, TinyData, args=args, trainer_defaults={**defaults, "callbacks": timer})
    assert timer in cli.trainer.callbacks
    assert any(isinstance(c, SaveConfigCallback) for c in cli.trainer.callbacks)
    assert isinstance(cli.trainer.logger, L.CSVLogger)
    assert Path(tmp_path, "lightning_logs", "version_0", "config.yaml").is_file()
    # the same log directory again: the logger warns that it is not empty, the config is refused
    with pytest.warns(UserWarning, match="exists and is not empty"):
        with pytest.raises(RuntimeError, match="config.yaml to not exist"):
            LightningCLI(TinyModel, TinyData, args=args, trainer_defaults=defaults)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        LightningCLI(TinyModel, TinyData, args=args, trainer_defaults=defaults, save_config_kwargs={"overwrite": True})


def test_python_dash_m_statemachine_trains_the_example_config(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    command = [
        sys.executable,
        "-m",
        "statemachine",
        "fit",
        "--config",
        str(DIGITS_CONFIG),
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=2",
        "--trainer.limit_val_batches=1",
        "--trainer.log_every_n_steps=1",
        f"--trainer.default_root_dir={tmp_path}",
        *QUIET,
    ]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    saved = yaml.safe_load(Path(tmp_path, "lightning_logs", "version_0", "config.yaml").read_text())
    assert saved["data"]["class_path"] == "examples.digits.DigitsData"
    assert list(Path(tmp_path, "lightning_logs", "version_0", "checkpoints").glob("*.ckpt"))


def test_the_machine_table_stays_out_of_the_config_and_comes_from_trainer_defaults(tmp_path: Path) -> None:
    args = ["fit", "--trainer.max_steps=1", "--trainer.limit_val_batches=0", *QUIET]
    named = L.TABLE.extend(name="from-defaults")
    defaults = {"default_root_dir": str(tmp_path), "table": named}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = LightningCLI(TinyModel, TinyData, args=args, trainer_defaults=defaults)
    assert [str(w.message) for w in caught if "serialize" in str(w.message)] == []
    assert cli.trainer.table is named
    saved = yaml.safe_load(Path(cli.trainer.log_dir, "config.yaml").read_text())
    assert "table" not in saved["trainer"] and saved["trainer"]["max_steps"] == 1
    with pytest.raises(SystemExit):
        LightningCLI(TinyModel, TinyData, args=[*args, "--trainer.table=x"], trainer_defaults=defaults)
