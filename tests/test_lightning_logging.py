"""The metric views and logger calls Lightning users read: `logged_metrics` current during a batch (also without a
logger), `callback_metrics` after evaluation, the keys `validate`/`test` return, and the exact sequence of calls
a user's own `Logger` subclass receives."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import Boom, make_loader, quiet_trainer
from torch import nn

import statemachine as L


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    return {name: float(value) for name, value in metrics.items()}


class Logs(L.LightningModule):
    """Logs its batch index under every combination of flags users write."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.log("a", float(batch_idx))
        self.log("b", float(batch_idx), on_step=True, on_epoch=True)
        self.log("c", float(batch_idx), on_step=False, on_epoch=True)
        self.log("private", float(batch_idx), logger=False)
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", float(batch_idx))
        self.log("v_both", float(batch_idx), on_step=True, on_epoch=True)
        self.log("v_step_only", float(batch_idx), on_step=True, on_epoch=False)
        self.log("v_private", float(batch_idx), logger=False)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", float(batch_idx), on_step=True, on_epoch=True)
        self.log("test_plain", float(batch_idx))
        self.log("test_private", float(batch_idx), logger=False)
        self.log("test_step_only", float(batch_idx), on_step=True, on_epoch=False)

    def on_test_epoch_end(self) -> None:
        self.log("test_from_epoch_end", 5.0)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Reads(L.Callback):
    """Reads the views where callbacks usually read them."""

    def __init__(self) -> None:
        self.at: dict[str, tuple[dict[str, float], dict[str, float]]] = {}

    def _read(self, where: str, trainer: Any) -> None:
        self.at[where] = (_numbers(trainer.logged_metrics), _numbers(trainer.callback_metrics))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._read(f"train batch {batch_idx}", trainer)

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._read(f"{trainer.state.fn} val batch {args[2]}", trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._read("train epoch end", trainer)


@pytest.mark.parametrize("logger", [False, True])
def test_logged_metrics_hold_the_current_batch_values_with_or_without_a_logger(tmp_path: Path, logger: bool) -> None:
    reads = Reads()
    trainer = quiet_trainer(
        tmp_path,
        logger=logger,
        callbacks=[reads],
        limit_train_batches=3,
        limit_val_batches=3,
        num_sanity_val_steps=0,
        log_every_n_steps=50,  # no step reaches a logger: the views must not depend on that
    )
    if logger:
        with pytest.warns(L.PossibleUserWarning, match="is smaller than the logging interval"):
            trainer.fit(Logs(), make_loader(), make_loader())
    else:
        trainer.fit(Logs(), make_loader(), make_loader())
    logged, callback = reads.at["train batch 1"]
    assert logged == {"a": 1.0, "b_step": 1.0}
    assert callback == {"a": 1.0, "b": 1.0, "b_step": 1.0, "private": 1.0}  # no epoch value before the epoch end
    # during validation the evaluation step values reach the loggers' view but never the callbacks' view
    logged, callback = reads.at["fit val batch 0"]
    assert logged == {"a": 2.0, "b_step": 2.0, "v_both_step": 0.0, "v_step_only": 0.0}
    assert callback == {"a": 2.0, "b": 2.0, "b_step": 2.0, "private": 2.0}
    logged, callback = reads.at["train epoch end"]
    validation = {"v": 1.0, "v_both_epoch": 1.0, "v_both_step": 2.0, "v_step_only": 2.0}
    assert logged == {"a": 2.0, "b_step": 2.0, "b_epoch": 1.0, "c": 1.0, **validation}
    assert callback == {
        "a": 2.0,
        "b": 1.0,
        "b_step": 2.0,
        "b_epoch": 1.0,
        "c": 1.0,
        "private": 2.0,
        "v": 1.0,
        "v_both": 1.0,
        "v_both_epoch": 1.0,
        "v_private": 1.0,
    }
    assert _numbers(trainer.logged_metrics) == logged and _numbers(trainer.callback_metrics) == callback


def test_validate_and_test_return_the_logged_epoch_values_under_their_logged_names(tmp_path: Path) -> None:
    reads = Reads()
    model = Logs()
    trainer = quiet_trainer(tmp_path, callbacks=[reads], limit_val_batches=3, limit_test_batches=3)
    assert trainer.validate(model, make_loader(), verbose=False) == [{"v": 1.0, "v_both_epoch": 1.0}]
    assert reads.at["validate val batch 1"][1] == {}  # evaluation step values are no callback metrics
    assert _numbers(trainer.callback_metrics) == {"v": 1.0, "v_both": 1.0, "v_both_epoch": 1.0, "v_private": 1.0}
    results = trainer.test(model, make_loader(), verbose=False)
    assert results == [{"test_loss_epoch": 1.0, "test_plain": 1.0, "test_from_epoch_end": 5.0}]
    # a new run starts with empty views: nothing of the validation above is left
    assert _numbers(trainer.logged_metrics) == {
        "test_loss_step": 2.0,
        "test_loss_epoch": 1.0,
        "test_plain": 1.0,
        "test_step_only": 2.0,
        "test_from_epoch_end": 5.0,
    }
    assert _numbers(trainer.callback_metrics) == {
        "test_loss": 1.0,
        "test_loss_epoch": 1.0,
        "test_plain": 1.0,
        "test_private": 1.0,
        "test_from_epoch_end": 5.0,
    }


def test_the_printed_results_use_the_returned_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet_trainer(tmp_path, limit_test_batches=2).test(Logs(), make_loader())
    printed = capsys.readouterr().out
    assert "test_loss_epoch" in printed and "test_private" not in printed


class Recording(L.Logger):
    """A user's own logger: records every call the trainer makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append(("log_metrics", step, sorted(metrics)))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("log_hyperparams", dict(params)))

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        self.calls.append(("log_graph", type(model).__name__))

    def save(self) -> None:
        self.calls.append(("save",))

    def finalize(self, status: str) -> None:
        self.calls.append(("finalize", status))

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self.calls.append(("after_save_checkpoint", os.path.basename(checkpoint_callback.best_model_path)))


class LogsLess(Logs):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.log("t", float(batch_idx), on_step=True, on_epoch=True)
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", float(batch_idx))
        self.log("vs", float(batch_idx), on_step=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("ts", float(batch_idx), on_step=True, on_epoch=True)

    def on_test_epoch_end(self) -> None:
        """Logs nothing more at the end of the test epoch."""


def _recording_trainer(tmp_path: Path, logger: Recording, *callbacks: L.Callback) -> L.Trainer:
    return quiet_trainer(
        tmp_path,
        logger=logger,
        enable_checkpointing=True,
        callbacks=[L.ModelCheckpoint(dirpath=tmp_path / "ckpts"), *callbacks],
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=2,
        limit_test_batches=2,
        num_sanity_val_steps=1,
        log_every_n_steps=1,
    )


def _saved(*entry: Any) -> list[tuple[Any, ...]]:
    """A `log_metrics` call is always followed by `save()`."""
    return [entry, ("save",)]


START = [("log_hyperparams", {"lr": 0.1}), ("log_graph", "LogsLess"), ("save",)]


def test_a_user_logger_sees_lightnings_call_sequence(tmp_path: Path) -> None:
    logger = Recording()
    trainer = _recording_trainer(tmp_path, logger)
    model = LogsLess()
    trainer.fit(model, make_loader(), make_loader())

    def epoch(first_step: int, val_step: int, checkpoint: str) -> list[tuple[Any, ...]]:
        return [
            *_saved("log_metrics", first_step, ["epoch", "t_step"]),
            *_saved("log_metrics", first_step + 1, ["epoch", "t_step"]),
            *_saved("log_metrics", val_step, ["vs_step"]),  # evaluation steps count per loader, without "epoch"
            *_saved("log_metrics", val_step + 1, ["vs_step"]),
            *_saved("log_metrics", first_step + 1, ["epoch", "v", "vs_epoch"]),
            ("after_save_checkpoint", checkpoint),
            *_saved("log_metrics", first_step + 1, ["epoch", "t_epoch"]),
        ]

    assert logger.calls == [
        *START,
        *epoch(0, 0, "epoch=0-step=2.ckpt"),
        *epoch(2, 2, "epoch=1-step=4.ckpt"),
        ("finalize", "success"),
    ]
    for entry, name in ((trainer.validate, "vs"), (trainer.test, "ts")):
        logger.calls.clear()
        entry(model, make_loader(), verbose=False)
        assert logger.calls == [
            *START,
            *_saved("log_metrics", 0, [f"{name}_step"]),
            *_saved("log_metrics", 1, [f"{name}_step"]),
            *_saved("log_metrics", 4, ["epoch", *(["v"] if name == "vs" else []), f"{name}_epoch"]),
            ("finalize", "success"),
        ]


def test_a_user_logger_is_finalized_as_failed(tmp_path: Path) -> None:
    class FailInSecondEpoch(L.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.current_epoch == 1:
                raise Boom("second epoch")

    logger = Recording()
    with pytest.raises(Boom):
        _recording_trainer(tmp_path, logger, FailInSecondEpoch()).fit(LogsLess(), make_loader(), make_loader())
    assert logger.calls[:3] == START
    assert logger.calls[-4:] == [
        ("after_save_checkpoint", "epoch=0-step=2.ckpt"),
        *_saved("log_metrics", 1, ["epoch", "t_epoch"]),
        ("finalize", "failed"),
    ]


def test_without_autolog_no_hyperparameters_or_graph_are_sent(tmp_path: Path) -> None:
    logger = Recording()
    trainer = quiet_trainer(
        tmp_path, logger=logger, enable_autolog_hparams=False, limit_train_batches=1, log_every_n_steps=1
    )
    trainer.fit(LogsLess(), make_loader())
    assert not [call for call in logger.calls if call[0] in ("log_hyperparams", "log_graph")]


def test_several_eval_loaders_name_the_forked_values_before_the_loader_suffix(tmp_path: Path) -> None:
    class TwoLoaders(Logs):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("v", float(batch_idx + 10 * dataloader_idx))
            self.log("vb", float(batch_idx + 10 * dataloader_idx), on_step=True, on_epoch=True)

        def on_validation_epoch_end(self) -> None:
            self.log("e", 3.0)

    trainer = quiet_trainer(tmp_path, limit_val_batches=2)
    results = trainer.validate(TwoLoaders(), [make_loader(), make_loader()], verbose=False)
    assert results == [
        {"v/dataloader_idx_0": 0.5, "vb_epoch/dataloader_idx_0": 0.5, "e": 3.0},
        {"v/dataloader_idx_1": 10.5, "vb_epoch/dataloader_idx_1": 10.5, "e": 3.0},
    ]
    assert _numbers(trainer.logged_metrics) == {
        "e": 3.0,
        "v/dataloader_idx_0": 0.5,
        "v/dataloader_idx_1": 10.5,
        "vb_epoch/dataloader_idx_0": 0.5,
        "vb_epoch/dataloader_idx_1": 10.5,
        "vb_step/dataloader_idx_0": 1.0,
        "vb_step/dataloader_idx_1": 11.0,
    }
