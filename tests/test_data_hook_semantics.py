"""Data, hook and error behaviours as Lightning 2.6 shows them: the trainer's loader attributes during and after
each call, invalid loaders, the stage a `*_dataloader` hook runs in, sampler epochs, worker warnings and shutdown,
a DataModule's description, hook profiling, the eval-mode warning, `on_train_batch_start` returning -1 with LR
schedulers, and the warning for predictions that are None."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import Boom, TinyModel, make_loader, quiet_trainer
from torch.utils.data import DataLoader

import statemachine as L
from stages.exceptions import TrainerWarning
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


# ---- 5. set_epoch on the samplers of every loader ------------------------------------------------------------


class EpochSampler(torch.utils.data.SequentialSampler):
    """Records each `set_epoch` call under its name."""

    def __init__(self, data: Any, name: str, calls: list[tuple[str, int]]) -> None:
        super().__init__(data)
        self.name, self.calls = name, calls

    def set_epoch(self, epoch: int) -> None:
        self.calls.append((self.name, epoch))


def _epoch_loader(name: str, calls: list[tuple[str, int]], batch_sampler: bool = False) -> DataLoader:
    data = make_loader().dataset
    sampler = EpochSampler(data, name, calls)
    if batch_sampler:
        return DataLoader(data, batch_sampler=torch.utils.data.BatchSampler(sampler, 8, drop_last=False))
    return DataLoader(data, sampler=sampler, batch_size=8)


@pytest.mark.parametrize("batch_sampler", [False, True], ids=["sampler", "batch-sampler"])
def test_set_epoch_reaches_every_loader_once_before_each_run(tmp_path: Path, batch_sampler: bool) -> None:
    calls: list[tuple[str, int]] = []

    class Marks(TinyModel):
        def on_validation_start(self) -> None:
            calls.append(("validation_start", self.current_epoch))

    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_val_batches=1)
    model = Marks()
    trainer.fit(model, _epoch_loader("train", calls, batch_sampler), _epoch_loader("val", calls, batch_sampler))
    assert calls == [
        ("val", 0),  # the sanity check
        ("validation_start", 0),
        ("train", 0),
        ("val", 0),
        ("validation_start", 0),
        ("train", 1),
        ("val", 1),
        ("validation_start", 1),
    ]
    calls.clear()
    trainer.validate(model, _epoch_loader("validate", calls, batch_sampler))
    trainer.test(model, _epoch_loader("test", calls, batch_sampler), verbose=False)
    trainer.predict(model, _epoch_loader("predict", calls, batch_sampler))
    assert calls == [("validate", 2), ("validation_start", 2), ("test", 2), ("predict", 2)]


# ---- 8. a sequential CombinedLoader for training: see tests/test_combined_loader.py ---------------------------
# ---- 12. DataModule hooks under the profiler ------------------------------------------------------------------


class TransferringData(L.LightningDataModule):
    def prepare_data(self) -> None:
        pass

    def setup(self, stage: str) -> None:
        pass

    def teardown(self, stage: str) -> None:
        pass

    def train_dataloader(self) -> DataLoader:
        return make_loader()

    def val_dataloader(self) -> DataLoader:
        return make_loader()

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch


def test_the_simple_profiler_times_datamodule_hooks_under_their_datamodule_names(tmp_path: Path) -> None:
    profiler = L.profilers.SimpleProfiler()
    trainer = quiet_trainer(tmp_path, profiler=profiler, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(TinyModel(), datamodule=TransferringData())
    names = {name for name in profiler.recorded_durations if name.startswith("[LightningDataModule]")}
    hooks = [
        "prepare_data",
        "setup",
        "train_dataloader",
        "val_dataloader",
        "on_before_batch_transfer",
        "transfer_batch_to_device",
        "on_after_batch_transfer",
        "teardown",
    ]
    assert names == {f"[LightningDataModule]TransferringData.{hook}" for hook in hooks}


class StatefulData(L.LightningDataModule):
    def train_dataloader(self) -> DataLoader:
        return make_loader()

    def state_dict(self) -> dict[str, Any]:
        return {"seen": 1}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    def on_exception(self, exception: BaseException) -> None:
        pass


def _datamodule_actions(profiler: Any) -> list[str]:
    prefix = "[LightningDataModule]StatefulData."
    return sorted(name.removeprefix(prefix) for name in profiler.recorded_durations if name.startswith(prefix))


@pytest.mark.filterwarnings("ignore:The dirpath has changed")  # the resume saves into a folder of its own
def test_checkpoint_and_exception_hooks_of_a_datamodule_are_profiled_and_no_default_prepare_data(
    tmp_path: Path,
) -> None:
    profiler = L.profilers.SimpleProfiler()
    trainer = quiet_trainer(tmp_path, profiler=profiler, limit_train_batches=1, enable_checkpointing=True)
    trainer.fit(TinyModel(), datamodule=StatefulData())
    assert _datamodule_actions(profiler) == ["setup", "state_dict", "teardown", "train_dataloader"]
    saved = trainer.checkpoint_callback.best_model_path
    profiler = L.profilers.SimpleProfiler()
    resumed = quiet_trainer(
        tmp_path / "resumed", profiler=profiler, max_epochs=2, limit_train_batches=1, enable_checkpointing=True
    )
    resumed.fit(TinyModel(), datamodule=StatefulData(), ckpt_path=saved)
    assert "load_state_dict" in _datamodule_actions(profiler)
    profiler = L.profilers.SimpleProfiler()
    with pytest.raises(Boom):
        quiet_trainer(tmp_path, profiler=profiler).fit(TinyModel(fail_in="training_step"), datamodule=StatefulData())
    assert _datamodule_actions(profiler) == ["on_exception", "setup", "train_dataloader"]
    assert not any(name.endswith((".prepare_data", ".configure_model")) for name in profiler.recorded_durations)


# ---- 15. on_train_batch_start returning -1, and the LR schedulers ---------------------------------------------


class SkipsRestOfEpoch(TinyModel):
    """Halves the LR per scheduler step; `on_train_batch_start` returns -1 at batch `skip_at`."""

    def __init__(self, interval: str, frequency: int = 1, skip_at: int = 2) -> None:
        super().__init__()
        self.interval, self.frequency, self.skip_at = interval, frequency, skip_at
        self.lrs: list[float] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx == self.skip_at else None

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        config = {"scheduler": scheduler, "interval": self.interval, "frequency": self.frequency}
        return {"optimizer": optimizer, "lr_scheduler": config}

    def on_train_epoch_end(self) -> None:
        self.lrs.append(self.optimizers().param_groups[0]["lr"])


@pytest.mark.parametrize(
    ("interval", "frequency", "skip_at", "lrs", "steps"),
    [
        ("epoch", 1, 2, [0.5, 0.25, 0.125], 6),
        ("epoch", 2, 2, [1.0, 0.5, 0.5], 6),
        ("step", 1, 2, [0.5**3, 0.5**6, 0.5**9], 6),  # two steps, and one for the skipped batch
        ("step", 2, 2, [0.5, 0.25, 0.125], 6),  # batch 1 steps; the skipped batch 2 (index 3) does not
        ("step", 1, 0, [0.5, 0.25, 0.125], 0),  # nothing trains, yet the skipped batch steps the scheduler
        ("epoch", 1, 0, [0.5, 0.25, 0.125], 0),
    ],
)
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`")
def test_a_skipped_epoch_rest_steps_the_schedulers_as_lightning_does(
    tmp_path: Path, interval: str, frequency: int, skip_at: int, lrs: list[float], steps: int
) -> None:
    model = SkipsRestOfEpoch(interval, frequency, skip_at)
    trainer = quiet_trainer(tmp_path, max_epochs=3)
    trainer.fit(model, make_loader(n=48))
    assert model.lrs == lrs
    assert trainer.global_step == steps


# ---- 16. errors and warnings ------------------------------------------------------------------------------


class PredictsNone(TinyModel):
    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return None if batch_idx % 2 else 1


@pytest.mark.parametrize("return_predictions", [True, False])
def test_a_predict_step_returning_none_warns_once(tmp_path: Path, return_predictions: bool) -> None:
    with pytest.warns(UserWarning, match="predict returned None if it was on purpose, ignore this warning") as caught:
        result = quiet_trainer(tmp_path).predict(PredictsNone(), make_loader(), return_predictions=return_predictions)
    assert sum("predict returned None" in str(w.message) for w in caught) == 1
    assert result == ([1, None, 1, None] if return_predictions else None)


@pytest.mark.parametrize("call", ["fit", "validate", "test", "predict"])
def test_several_loaders_need_a_step_that_takes_dataloader_idx(tmp_path: Path, call: str) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    loaders = [make_loader(), make_loader()]
    hook, step = {
        "fit": ("val_dataloader", "validation_step"),
        "validate": ("val_dataloader", "validation_step"),
        "test": ("test_dataloader", "test_step"),
        "predict": ("predict_dataloader", "predict_step"),
    }[call]
    expected = rf"You provided multiple `{hook}`, but no `dataloader_idx` argument in `TinyModel.{step}\(\)`"
    with pytest.raises(RuntimeError, match=expected):
        if call == "fit":
            trainer.fit(TinyModel(), make_loader(), loaders)
        else:
            getattr(trainer, call)(TinyModel(), loaders)


# ---- 6. the loader-worker warnings -----------------------------------------------------------------------------


def _warnings_of(caught: Any, words: str) -> list[tuple[type, str]]:
    return [(w.category, str(w.message)) for w in caught if words in str(w.message)]


def test_too_few_workers_warn_per_requested_loader_when_cores_allow_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)), raising=False)
    with pytest.warns(L.PossibleUserWarning) as caught:
        quiet_trainer(tmp_path, limit_train_batches=1, limit_val_batches=1).fit(
            TinyModel(), make_loader(), make_loader()
        )
        quiet_trainer(tmp_path).test(TinyModel(), make_loader(), verbose=False)
    advice = "does not have many workers which may be a bottleneck. Consider increasing the value of the `num_workers`"
    assert _warnings_of(caught, advice) == [
        (
            L.PossibleUserWarning,
            f"The '{name}' {advice} argument` to `num_workers=7` in the `DataLoader` to improve performance.",
        )
        for name in ("val_dataloader", "train_dataloader", "test_dataloader")
    ]


def test_suggested_max_num_workers_shares_the_cores_and_keeps_one_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from statemachine.utilities import suggested_max_num_workers

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert [suggested_max_num_workers(n) for n in (1, 2, 4, 8)] == [7, 3, 1, 1]
    with pytest.raises(ValueError, match="`local_world_size` should be >= 1, got 0."):
        suggested_max_num_workers(0)


def test_no_worker_advice_when_the_cores_leave_no_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_trainer(tmp_path, limit_train_batches=1, limit_val_batches=1).fit(
            TinyModel(), make_loader(), make_loader()
        )
    assert _warnings_of(caught, "workers") == []


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator is found")
def test_spawned_workers_that_do_not_persist_and_pinned_persistent_ones_under_reloads_warn(tmp_path: Path) -> None:
    spawn = torch.multiprocessing.get_context("spawn")
    data = make_loader().dataset
    train = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context=spawn)
    with pytest.warns(UserWarning) as caught:
        trainer = quiet_trainer(tmp_path, limit_train_batches=1, limit_val_batches=0)
        trainer.fit(TinyModel(), train)
    assert _warnings_of(caught, "persistent") == [
        (
            TrainerWarning,
            "Consider setting `persistent_workers=True` in 'train_dataloader' to speed up the dataloader worker "
            "initialization.",
        )
    ]
    pinned = DataLoader(data, batch_size=8, num_workers=2, persistent_workers=True, pin_memory=True)
    with pytest.warns(L.PossibleUserWarning, match=r"pin_memory=True`, `persistent_workers=True`\) and `Trainer\("):
        trainer = quiet_trainer(
            tmp_path, limit_train_batches=1, limit_val_batches=0, reload_dataloaders_every_n_epochs=1
        )
        trainer.fit(TinyModel(), pinned)


# ---- 7. persistent workers stop with the call -------------------------------------------------------------------


def test_persistent_workers_are_shut_down_when_fit_and_validate_return(tmp_path: Path) -> None:
    import multiprocessing

    data = make_loader().dataset
    train = DataLoader(data, batch_size=8, num_workers=1, persistent_workers=True)
    val = DataLoader(data, batch_size=8, num_workers=1, persistent_workers=True)
    alive: list[int] = []

    class Counts(TinyModel):
        def on_train_epoch_end(self) -> None:
            alive.append(len(multiprocessing.active_children()))

    trainer = quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(Counts(), train, val)
    assert alive == [2, 2]  # both loaders keep their worker between epochs
    assert multiprocessing.active_children() == []
    assert train._iterator is None and val._iterator is None
    trainer.validate(TinyModel(), val, verbose=False)
    assert multiprocessing.active_children() == [] and val._iterator is None


# ---- 9. str(datamodule) --------------------------------------------------------------------------------------


def test_a_datamodule_describes_its_loaders_datasets(tmp_path: Path) -> None:
    class Described(L.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            return make_loader(n=24)

        def val_dataloader(self) -> list[DataLoader]:
            return [make_loader(n=8), make_loader(n=16)]

        def test_dataloader(self) -> DataLoader:
            return DataLoader(CountingStream(), batch_size=2)

    class NotReady(L.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            raise RuntimeError("setup() has not run")

    assert str(Described()) == (
        "{Train dataloader: size=24}\n"
        "{Validation dataloader: 1. size=8 ; 2. size=16}\n"
        "{Test dataloader: size=NA}\n"
        "{Predict dataloader: None}"
    )
    assert str(NotReady()) == "\n".join(
        f"{{{kind} dataloader: None}}" for kind in ("Train", "Validation", "Test", "Predict")
    )
    assert repr(NotReady()).startswith("<")  # repr stays the object's


class CountingStream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(4))


# ---- 13. freeze / unfreeze -------------------------------------------------------------------------------------


def test_freeze_and_unfreeze_set_grads_and_modes_of_every_parameter_and_module() -> None:
    model = TinyModel()
    model.extra = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout())
    model.frozen = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
    model.freeze()
    assert not any(p.requires_grad for p in model.parameters())
    assert not any(m.training for m in model.modules())
    model.extra.eval()
    model.unfreeze()
    assert all(p.requires_grad for p in model.parameters())  # the one that never had grads gets them too
    assert all(m.training for m in model.modules())


# ---- 14. modules left in eval mode at the start of training ------------------------------------------------


def test_modules_in_eval_mode_when_training_starts_warn(tmp_path: Path) -> None:
    class PartlyFrozen(TinyModel):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout())
            self.head.eval()

    expected = (
        "Found 3 module(s) in eval mode at the start of training. This may lead to unexpected behavior during "
        "training. If this is intentional, you can ignore this warning."
    )
    with pytest.warns(L.PossibleUserWarning) as caught:
        quiet_trainer(tmp_path, limit_train_batches=1, limit_val_batches=1).fit(
            PartlyFrozen(), make_loader(), make_loader()
        )
    assert _warnings_of(caught, "eval mode") == [(L.PossibleUserWarning, expected)]


def test_a_module_put_in_eval_mode_in_on_train_start_is_too_late_to_warn(tmp_path: Path) -> None:
    import warnings

    class Late(TinyModel):
        def on_train_start(self) -> None:
            self.layer.eval()

    class Early(TinyModel):
        def on_fit_start(self) -> None:
            self.layer.eval()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_trainer(tmp_path, limit_train_batches=1).fit(Late(), make_loader())
    assert _warnings_of(caught, "eval mode") == []
    with pytest.warns(L.PossibleUserWarning, match="Found 1 module"):
        quiet_trainer(tmp_path, limit_train_batches=1).fit(Early(), make_loader())


# ---- 4. one process: no sampler is replaced ---------------------------------------------------------------------


@pytest.mark.parametrize("use_distributed_sampler", [True, False])
def test_in_one_process_the_loaders_and_their_samplers_stay_the_users(
    tmp_path: Path, use_distributed_sampler: bool
) -> None:
    data = make_loader().dataset
    shuffled = DataLoader(data, batch_size=8, shuffle=True)
    own = DataLoader(data, batch_size=8, sampler=torch.utils.data.DistributedSampler(data, num_replicas=2, rank=0))
    trainer = quiet_trainer(tmp_path, use_distributed_sampler=use_distributed_sampler)
    trainer.fit(TinyModel(), shuffled, own)
    assert trainer.train_dataloader is shuffled and isinstance(shuffled.sampler, torch.utils.data.RandomSampler)
    assert trainer.val_dataloaders is own and trainer.num_val_batches == [2]  # the user's half of 32 rows


# ---- 10. the state an interrupted run leaves ------------------------------------------------------------------


def test_a_failed_run_leaves_interrupted_its_fn_and_no_stage(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert (trainer.state.status, trainer.state.fn, trainer.state.stage) == ("interrupted", "fit", None)
    assert trainer.interrupted and not trainer.training


def test_a_keyboard_interrupt_exits_with_status_one_and_leaves_interrupted(tmp_path: Path) -> None:
    class CtrlC(TinyModel):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            raise KeyboardInterrupt

    trainer = quiet_trainer(tmp_path)
    with pytest.raises(SystemExit) as exited:
        trainer.test(CtrlC(), make_loader(), verbose=False)
    assert exited.value.code == 1
    # Lightning keeps the stage ("test") here; this project's machine rests in `interrupted`, which has none.
    assert (trainer.state.status, trainer.state.fn, trainer.state.stage) == ("interrupted", "test", None)


# ---- 11. grad mode and module mode around predict_step ---------------------------------------------------------


def test_predict_step_its_batch_hooks_and_transfer_hooks_run_in_inference_mode_on_an_eval_module(
    tmp_path: Path,
) -> None:
    seen: dict[str, tuple[bool, bool, bool]] = {}

    class Modes(TinyModel):
        def _note(self, hook: str) -> None:
            seen[hook] = (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), self.training)

        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            self._note("on_before_batch_transfer")
            return batch

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            self._note("on_after_batch_transfer")
            return batch

        def on_predict_batch_start(self, batch: Any, batch_idx: int) -> None:
            self._note("on_predict_batch_start")

        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self._note("predict_step")
            return super().predict_step(batch, batch_idx)

        def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._note("on_predict_batch_end")

        def on_predict_epoch_end(self) -> None:
            self._note("on_predict_epoch_end")

    model = Modes()
    quiet_trainer(tmp_path).predict(model, make_loader())
    assert seen == dict.fromkeys(seen, (False, True, False)) and len(seen) == 6
    assert model.training  # and back in train mode after predict


@pytest.mark.parametrize("hook", ["on_predict_start", "on_predict_batch_end"])
def test_self_log_in_a_predict_hook_raises_lightnings_words(tmp_path: Path, hook: str) -> None:
    def log(self: TinyModel, *args: Any) -> None:
        self.log("x", 1.0)

    model = type("LogsWhilePredicting", (TinyModel,), {hook: log})()
    words = "You are trying to `self.log()` but the loop's result collection is not registered yet"
    with pytest.raises(L.MisconfigurationException, match=re.escape(words)):
        quiet_trainer(tmp_path).predict(model, make_loader())


# ---- 17. the data hooks a module and a DataModule share ----------------------------------------------------------


def test_a_module_and_a_datamodule_share_lightnings_data_hooks_and_their_defaults() -> None:
    from statemachine.core.hooks import DataHooks

    module, datamodule = TinyModel(), L.LightningDataModule()
    for owner in (module, datamodule):
        assert isinstance(owner, DataHooks)
        assert owner.prepare_data_per_node is True
        assert owner.allow_zero_length_dataloader_with_multiple_devices is False
        assert owner.on_before_batch_transfer("batch", 0) == "batch"
    with pytest.raises(L.MisconfigurationException, match="`test_dataloader` must be implemented.*TinyModel"):
        module.test_dataloader()
