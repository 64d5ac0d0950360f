"""Data, hook and error behaviours as Lightning 2.6 shows them: the trainer's loader attributes during and after
each call, invalid loaders, the stage a `*_dataloader` hook runs in, sampler epochs, worker warnings and shutdown,
a DataModule's description, hook profiling, the eval-mode warning, `on_train_batch_start` returning -1 with LR
schedulers, and the warning for predictions that are None."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer
from torch.utils.data import DataLoader

import statemachine as L
from statemachine.engine.enums import RunningStage, TrainerFn
from statemachine.utilities.combined_loader import CombinedLoader

# ---- 1. trainer.train_dataloader / val_dataloaders / test_dataloaders / predict_dataloaders ------------------


def _loaders(trainer: L.Trainer) -> tuple[Any, Any, Any, Any]:
    return trainer.train_dataloader, trainer.val_dataloaders, trainer.test_dataloaders, trainer.predict_dataloaders


class SeesLoaders(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, tuple[Any, Any, Any, Any]] = {}

    def on_train_start(self) -> None:
        self.seen["train_start"] = _loaders(self.trainer)

    def on_validation_start(self) -> None:
        key = "sanity" if self.trainer.sanity_checking else "validation_start"
        self.seen[key] = _loaders(self.trainer)

    def on_test_start(self) -> None:
        self.seen["test_start"] = _loaders(self.trainer)

    def on_predict_start(self) -> None:
        self.seen["predict_start"] = _loaders(self.trainer)


def test_each_call_shows_its_own_loaders_and_keeps_them_after_it_returns(tmp_path: Path) -> None:
    train, val, test, predict = make_loader(), make_loader(), make_loader(), make_loader()
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, limit_val_batches=2)
    assert _loaders(trainer) == (None, None, None, None)
    model = SeesLoaders()
    trainer.fit(model, train, val)
    assert model.seen["sanity"] == (None, val, None, None)  # the training data is loaded after the sanity check
    assert model.seen["train_start"] == (train, val, None, None)
    assert _loaders(trainer) == (train, val, None, None)  # kept after fit
    trainer.validate(model, val)
    assert _loaders(trainer) == (None, val, None, None)  # fit's training loader is gone
    trainer.test(model, test, verbose=False)
    assert model.seen["test_start"] == (None, None, test, None)
    assert _loaders(trainer) == (None, None, test, None)
    trainer.predict(model, predict)
    assert model.seen["predict_start"] == (None, None, None, predict)
    assert _loaders(trainer) == (None, None, None, predict)


class TrainsOnFirst(TinyModel):
    """Trains on the first member of a combined batch (a list or dict of batches)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        first = batch[0] if isinstance(batch, list) else next(iter(batch.values()))
        return super().training_step(first, batch_idx)


def test_the_train_dataloader_shows_the_collection_given_not_its_combined_loader(tmp_path: Path) -> None:
    pair = [make_loader(), make_loader()]
    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    trainer.fit(TrainsOnFirst(), CombinedLoader(pair, "max_size"))
    assert trainer.train_dataloader == pair
    named = {"a": make_loader(), "b": make_loader()}
    trainer.fit(TrainsOnFirst(), named)
    assert trainer.train_dataloader == named


def test_validate_with_nothing_logged_prints_no_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Silent(TinyModel):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            pass

    assert quiet_trainer(tmp_path).validate(Silent(), make_loader()) == [{}]
    assert "Validate metric" not in capsys.readouterr().out


# ---- 2. None and non-iterable loaders ----------------------------------------------------------------


class NotALoader:
    pass


@pytest.mark.parametrize("bad", [None, NotALoader(), 5], ids=["none", "object", "int"])
@pytest.mark.parametrize("call", ["fit-train", "fit-val", "validate", "test", "predict"])
@pytest.mark.parametrize("owner", ["module", "datamodule"])
def test_a_hook_returning_an_invalid_loader_raises_lightnings_type_error(
    tmp_path: Path, bad: Any, call: str, owner: str
) -> None:
    kind = {"fit-train": "train", "fit-val": "val", "validate": "val"}.get(call, call)
    hooks = {f"{kind}_dataloader": lambda self: bad}
    if call == "fit-val":
        hooks["train_dataloader"] = lambda self: make_loader()
    if owner == "module":
        model, datamodule = type("Module", (TinyModel,), hooks)(), None
        shown = "Module"
    else:
        model, datamodule = TinyModel(), type("Data", (L.LightningDataModule,), hooks)()
        shown = "Data"
    method = getattr(quiet_trainer(tmp_path, num_sanity_val_steps=0), call.partition("-")[0])
    with pytest.raises(TypeError, match=rf"An invalid dataloader was returned from `{shown}.{kind}_dataloader\(\)`"):
        method(model, datamodule=datamodule)


@pytest.mark.parametrize("call", ["fit-train", "fit-val", "validate", "test", "predict"])
def test_a_non_iterable_loader_passed_directly_raises_lightnings_type_error(tmp_path: Path, call: str) -> None:
    method, _, which = call.partition("-")
    trainer = quiet_trainer(tmp_path)
    arguments = {"train": (NotALoader(),), "val": (make_loader(), NotALoader())}.get(which, (NotALoader(),))
    name = {"train": "train_dataloaders", "val": "val_dataloaders"}.get(which, "dataloaders")
    with pytest.raises(TypeError, match=rf"An invalid dataloader was passed to `Trainer.{method}\({name}=...\)`"):
        getattr(trainer, method)(TinyModel(), *arguments)


# ---- 3. the stage a *_dataloader hook runs in ------------------------------------------------------------


class RecordsLoaderRequests(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, Any, Any, bool, bool]] = []

    def _record(self, hook: str) -> None:
        trainer = self.trainer
        self.requests.append((hook, trainer.state.stage, trainer.state.fn, trainer.sanity_checking, trainer.training))

    def train_dataloader(self) -> DataLoader:
        self._record("train_dataloader")
        return make_loader()

    def val_dataloader(self) -> DataLoader:
        self._record("val_dataloader")
        return make_loader()

    def on_train_start(self) -> None:
        self.requests.append(("on_train_start", None, None, False, False))


TRAIN = ("train_dataloader", RunningStage.TRAINING, TrainerFn.FITTING, False, True)
VAL = ("val_dataloader", RunningStage.VALIDATING, TrainerFn.FITTING, False, False)
TRAIN_START = ("on_train_start", None, None, False, False)


@pytest.mark.parametrize(
    "flags",
    [{"num_sanity_val_steps": 0}, {"fast_dev_run": True}],
    ids=["no-sanity-check", "fast_dev_run"],
)
def test_the_validation_loader_is_requested_while_validating_before_on_train_start(
    tmp_path: Path, flags: dict[str, Any]
) -> None:
    model = RecordsLoaderRequests()
    quiet_trainer(tmp_path, limit_train_batches=2, **flags).fit(model)
    assert model.requests == [TRAIN, VAL, TRAIN_START]


def test_with_a_sanity_check_the_validation_loader_is_requested_while_sanity_checking(tmp_path: Path) -> None:
    model = RecordsLoaderRequests()
    quiet_trainer(tmp_path, limit_train_batches=2, limit_val_batches=2).fit(model)
    sanity = ("val_dataloader", RunningStage.SANITY_CHECKING, TrainerFn.FITTING, True, False)
    assert model.requests == [sanity, TRAIN, TRAIN_START]


def test_a_mid_epoch_resume_requests_the_validation_loader_while_validating(tmp_path: Path) -> None:
    class SaveMidEpoch(L.Callback):
        def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
            if trainer.global_step == 2:
                trainer.save_checkpoint(tmp_path / "mid.ckpt")

    quiet_trainer(tmp_path, callbacks=[SaveMidEpoch()], limit_train_batches=4).fit(RecordsLoaderRequests())
    model = RecordsLoaderRequests()
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=4)
    trainer.fit(model, ckpt_path=tmp_path / "mid.ckpt")
    assert model.requests == [TRAIN, VAL, TRAIN_START]
    assert trainer.global_step == 8  # the resumed epoch finished, then a second one ran
    assert [r.dest for r in trainer.history if r.trigger == "val_ready"] == ["fitting.training"]


def test_an_epoch_that_validates_later_requests_its_loader_in_that_validation(tmp_path: Path) -> None:
    class Records(RecordsLoaderRequests):
        def on_train_epoch_start(self) -> None:
            self.requests.append(("on_train_epoch_start", self.current_epoch, None, False, False))

    model = Records()
    trainer = quiet_trainer(tmp_path, max_epochs=2, check_val_every_n_epoch=2, num_sanity_val_steps=0)
    trainer.fit(model)
    assert model.requests == [
        TRAIN,
        TRAIN_START,
        ("on_train_epoch_start", 0, None, False, False),
        ("on_train_epoch_start", 1, None, False, False),
        VAL,
    ]


def test_a_reload_requests_the_validation_loader_in_the_validation_that_uses_it(tmp_path: Path) -> None:
    model = RecordsLoaderRequests()
    quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=2, reload_dataloaders_every_n_epochs=1).fit(model)
    sanity = ("val_dataloader", RunningStage.SANITY_CHECKING, TrainerFn.FITTING, True, False)
    assert model.requests == [sanity, TRAIN, TRAIN_START, TRAIN, VAL]
