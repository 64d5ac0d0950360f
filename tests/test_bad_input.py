"""Bad input gets a clear error or warning naming what is wrong: damaged checkpoint files, arguments that are
not dataloaders, an empty training loader, a loss that is no longer finite, a NaN monitored metric."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L
from devices.checkpoint_io import CorruptCheckpointError, load_checkpoint

# ---- damaged checkpoint files ---------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> bytes:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    trainer.fit(TinyModel(), make_loader())
    trainer.save_checkpoint(tmp_path / "good.ckpt")
    return (tmp_path / "good.ckpt").read_bytes()


@pytest.mark.parametrize("cut", ["half", "last byte", "last 100 bytes"])
def test_a_truncated_checkpoint_is_refused_naming_the_file(tmp_path: Path, saved: bytes, cut: str) -> None:
    kept = {"half": len(saved) // 2, "last byte": len(saved) - 1, "last 100 bytes": len(saved) - 100}[cut]
    path = tmp_path / "cut.ckpt"
    path.write_bytes(saved[:kept])
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    with pytest.raises(CorruptCheckpointError, match=r"cut\.ckpt.* is truncated"):
        trainer.fit(TinyModel(), make_loader(), ckpt_path=path)
    with pytest.raises(CorruptCheckpointError, match=r"cut\.ckpt.* is truncated"):
        TinyModel.load_from_checkpoint(path)


def test_every_damaged_copy_of_a_checkpoint_loads_or_raises_the_corrupt_checkpoint_error(
    tmp_path: Path, saved: bytes
) -> None:
    """Cut at every 97th byte and in each of the last 200, and one byte flipped at every 53rd: nothing but
    CorruptCheckpointError escapes."""
    path = tmp_path / "damaged.ckpt"
    for end in [*range(1, len(saved), 97), *range(len(saved) - 200, len(saved))]:
        path.write_bytes(saved[:end])
        with pytest.raises(CorruptCheckpointError, match="damaged.ckpt"):
            load_checkpoint(path)
    for at in range(0, len(saved), 53):
        path.write_bytes(saved[:at] + bytes([saved[at] ^ 0x5A]) + saved[at + 1 :])
        try:
            load_checkpoint(path)  # a flip inside tensor data loads: torch.load checks no checksums
        except CorruptCheckpointError as error:
            assert str(path) in str(error)


# ---- arguments that are not dataloaders -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "argument", "value"),
    [
        ("fit", "train_dataloaders", 42),
        ("fit", "val_dataloaders", 3.5),
        ("fit", "train_dataloaders", "data.csv"),
        ("validate", "dataloaders", "val.csv"),
        ("test", "dataloaders", 7),
        ("predict", "dataloaders", b"raw"),
    ],
)
def test_an_argument_that_is_not_a_dataloader_is_refused_naming_it(
    tmp_path: Path, call: str, argument: str, value: Any
) -> None:
    trainer = quiet_trainer(tmp_path)
    model = TinyModel()
    lightning = f"An invalid dataloader was passed to `Trainer.{call}({argument}=...)`. Found {value}."
    with pytest.raises(TypeError, match=re.escape(lightning)) as raised:
        getattr(trainer, call)(model, **{argument: value})
    assert f"{argument}={value!r}) is not a dataloader" in str(raised.value)  # names the value
    assert "DataLoader" in str(raised.value)  # says what is accepted
    assert trainer.state.status == "initializing"  # refused before anything ran


def test_a_bad_member_of_a_loader_collection_is_named(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(TypeError, match=r"train_dataloaders\[1\]='b\.csv'"):
        trainer.fit(TinyModel(), train_dataloaders=[make_loader(), "b.csv"])
    with pytest.raises(TypeError, match=r"val_dataloaders\['extra'\]=5"):
        trainer.fit(TinyModel(), make_loader(), val_dataloaders={"main": make_loader(), "extra": 5})


# ---- an empty training loader ---------------------------------------------------------------------------


def _loader(samples: int, **options: Any) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(samples, 4), torch.zeros(samples, dtype=torch.long)), **options)


@pytest.mark.parametrize(
    ("loader", "reason"),
    [
        (_loader(0, batch_size=8), "its dataset is empty"),
        (_loader(5, batch_size=8, drop_last=True), r"drop_last=True drops its only batch \(5 samples, batch_size=8\)"),
    ],
)
def test_an_empty_training_loader_warns_that_no_step_will_run(tmp_path: Path, loader: DataLoader, reason: str) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    # Lightning's words for a loader without batches come too (see the test below); this one says why and what follows.
    with (
        pytest.warns(UserWarning, match="Total length of `DataLoader` across ranks is zero"),
        pytest.warns(UserWarning, match=rf"training dataloader is empty \({reason}\): no training step will run"),
    ):
        trainer.fit(TinyModel(), loader)
    assert trainer.global_step == 0 and trainer.state.finished


@pytest.mark.parametrize("call", ["fit", "validate", "test", "predict"])
def test_an_empty_loader_of_any_kind_warns_in_lightnings_words_and_the_call_goes_on(tmp_path: Path, call: str) -> None:
    trainer = quiet_trainer(tmp_path)
    empty = _loader(0, batch_size=8)
    arguments = (make_loader(), empty) if call == "fit" else (empty,)
    with pytest.warns(UserWarning, match=r"Total length of `DataLoader` across ranks is zero\. Please make sure this"):
        getattr(trainer, call)(TinyModel(), *arguments)
    assert trainer.state.finished and trainer.global_step == (4 if call == "fit" else 0)


# ---- a loss that is no longer finite --------------------------------------------------------------------


class Diverging(TinyModel):
    """Its loss turns NaN from global step 3 on, and its weights with it."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        if self.global_step >= 3:
            loss = loss * math.nan
        self.log("epoch_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass


def test_a_non_finite_loss_warns_once_naming_the_step(tmp_path: Path) -> None:
    """The loss is checked on each epoch's last batch and at logging steps, on every device."""
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=4)  # log_every_n_steps=50: last batches
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Diverging(), make_loader())
    messages = [str(w.message) for w in caught if "training loss" in str(w.message)]
    assert len(messages) == 1  # five NaN steps, one warning
    assert messages[0].startswith("The training loss is nan at global step 3 (epoch 0, batch 3)")
    assert "backpropagating it puts NaN or inf into the gradients and weights." in messages[0]  # no scaler here

    trainer.max_epochs = 3  # the next fit continues with epoch 2, still NaN: a new run warns again
    with pytest.warns(UserWarning, match=r"training loss is nan at global step 11 \(epoch 2, batch 3\)"):
        trainer.fit(Diverging(), make_loader())


def test_a_non_finite_loss_is_caught_at_the_first_logging_step(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=1, log_every_n_steps=3)
    with pytest.warns(UserWarning, match=r"training loss is nan at global step 5 \(epoch 0, batch 5\)"):
        trainer.fit(Diverging(), make_loader(n=64))  # 8 batches, NaN from step 3; steps 2, 5 are logging steps


def test_a_nan_monitored_value_never_replaces_a_finite_best_checkpoint(tmp_path: Path) -> None:
    checkpoint = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="epoch_loss", save_top_k=1)
    trainer = quiet_trainer(
        tmp_path, enable_checkpointing=True, callbacks=[checkpoint], max_epochs=3, limit_train_batches=2
    )
    with pytest.warns(UserWarning, match="training loss is nan"):
        trainer.fit(Diverging(), make_loader())
    # Epoch 0 (steps 0-1) is finite, epoch 1 (steps 2-3) and 2 are NaN: the best stays epoch 0's file.
    assert Path(checkpoint.best_model_path).name == "epoch=0-step=2.ckpt"
    assert math.isfinite(float(checkpoint.best_model_score))
    weights = load_checkpoint(checkpoint.best_model_path)["state_dict"]["layer.weight"]
    assert torch.isfinite(weights).all()
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["epoch=0-step=2.ckpt"]
