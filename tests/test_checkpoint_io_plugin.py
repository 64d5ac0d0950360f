"""Checkpoint I/O plugins: `Trainer(plugins=[MyCheckpointIO()])` sees every save, load and removal of a run, in
the order Lightning 2.6.6 makes them (observed with a recording `TorchCheckpointIO` subclass under both)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from conftest import TinyModel, make_loader, quiet_trainer

import statemachine as L
from statemachine.plugins import CheckpointIO, TorchCheckpointIO
from statemachine.strategies import DDPStrategy, FSDPStrategy, SingleDeviceStrategy


class Recording(TorchCheckpointIO):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        self.calls.append(("save", os.path.basename(path)))
        super().save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        self.calls.append(("load", os.path.basename(path)))
        return super().load_checkpoint(path, weights_only=weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        self.calls.append(("remove", os.path.basename(path)))
        super().remove_checkpoint(path)

    def teardown(self) -> None:
        self.calls.append(("teardown",))


class FallingLoss(TinyModel):
    """Logs a monitored value that improves every epoch, so top-1 checkpointing evicts the previous file."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("score", -float(self.current_epoch))


def test_every_save_eviction_and_resume_goes_through_the_plugin(tmp_path: Any) -> None:
    plugin = Recording()
    best = L.callbacks.ModelCheckpoint(dirpath=tmp_path / "a", monitor="score", save_top_k=1, filename="{epoch}")
    trainer = quiet_trainer(
        tmp_path, max_epochs=3, plugins=[plugin], callbacks=[best], enable_checkpointing=True, num_sanity_val_steps=0
    )
    assert trainer.strategy.checkpoint_io is plugin
    trainer.fit(FallingLoss(), make_loader(), make_loader(n=8))
    assert plugin.calls == [
        ("save", "epoch=0.ckpt"),
        ("save", "epoch=1.ckpt"),
        ("remove", "epoch=0.ckpt"),
        ("save", "epoch=2.ckpt"),
        ("remove", "epoch=1.ckpt"),
        ("teardown",),
    ]
    assert sorted(os.listdir(tmp_path / "a")) == ["epoch=2.ckpt"]

    resumed = Recording()
    again = L.callbacks.ModelCheckpoint(dirpath=tmp_path / "a", monitor="score", save_top_k=1, filename="{epoch}")
    trainer = quiet_trainer(tmp_path, max_epochs=4, plugins=[resumed], callbacks=[again], enable_checkpointing=True)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        trainer.fit(FallingLoss(), make_loader(), make_loader(n=8), ckpt_path=best.best_model_path)
    # The file the run resumed from is kept, as Lightning keeps it, though a better one replaced it.
    assert resumed.calls == [("load", "epoch=2.ckpt"), ("save", "epoch=3.ckpt"), ("teardown",)]
    assert trainer.current_epoch == 4


def test_save_checkpoint_and_an_evaluation_from_a_path_use_the_plugin(tmp_path: Any) -> None:
    plugin = Recording()
    trainer = quiet_trainer(tmp_path, plugins=plugin, limit_train_batches=1)
    trainer.fit(TinyModel(), make_loader())
    plugin.calls.clear()
    trainer.save_checkpoint(tmp_path / "x.ckpt")
    trainer.validate(TinyModel(), make_loader(n=8), ckpt_path=str(tmp_path / "x.ckpt"), verbose=False)
    assert plugin.calls == [("save", "x.ckpt"), ("load", "x.ckpt"), ("teardown",)]


class InMemory(CheckpointIO):
    """A plugin not built on torch.save: checkpoints live in a dict."""

    def __init__(self) -> None:
        self.files: dict[str, dict[str, Any]] = {}

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        self.files[os.fspath(path)] = checkpoint

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return self.files[os.fspath(path)]

    def remove_checkpoint(self, path: Any) -> None:
        del self.files[os.fspath(path)]


def test_a_plugin_of_its_own_decides_where_checkpoints_live(tmp_path: Any) -> None:
    plugin = InMemory()
    trainer = quiet_trainer(tmp_path, max_epochs=2, strategy=SingleDeviceStrategy("cpu", checkpoint_io=plugin))
    trainer.fit(TinyModel(), make_loader())
    trainer.save_checkpoint(tmp_path / "memory.ckpt")
    assert not (tmp_path / "memory.ckpt").exists()
    assert plugin.files[str(tmp_path / "memory.ckpt")]["global_step"] == 8
    resumed = quiet_trainer(tmp_path, max_epochs=3, plugins=[plugin])
    resumed.fit(TinyModel(), make_loader(), ckpt_path=str(tmp_path / "memory.ckpt"))
    assert resumed.global_step == 12


def test_the_default_plugin_is_a_torch_checkpoint_io(tmp_path: Any) -> None:
    assert type(quiet_trainer(tmp_path).strategy.checkpoint_io) is TorchCheckpointIO
    plugin = TorchCheckpointIO()
    assert DDPStrategy(checkpoint_io=plugin).checkpoint_io is plugin


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"plugins": [TorchCheckpointIO(), TorchCheckpointIO()]}, "Received multiple values for CheckpointIO flags"),
        (
            {"plugins": [TorchCheckpointIO()], "strategy": SingleDeviceStrategy("cpu", checkpoint_io=InMemory())},
            "checkpoint_io set through both strategy class and plugins, choose one",
        ),
        ({"plugins": ["bogus"]}, "Found invalid type for plugin 'bogus'. Expected one of: Precision, CheckpointIO"),
    ],
)
def test_bad_plugins_raise_lightnings_errors(tmp_path: Any, options: dict[str, Any], words: str) -> None:
    with pytest.raises(L.MisconfigurationException, match=words):
        quiet_trainer(tmp_path, **options)


def test_a_sharded_strategy_refuses_a_checkpoint_io_plugin() -> None:
    with pytest.raises(ValueError, match="FSDPStrategy with the checkpoint I/O plugin .* is not supported"):
        FSDPStrategy(checkpoint_io=TorchCheckpointIO())
