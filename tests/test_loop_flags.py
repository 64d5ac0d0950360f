"""The fit loop's flags, as Lightning 2.6 defines them.

Stop conditions, validation scheduling, limits, overfit/fast_dev_run, grad and anomaly modes, barebones,
`PL_TRAINER_*` defaults, argument errors, several loaders, the training step's return value, accumulation, and the
Trainer's read-only properties.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import FakeClock, TinyModel, make_loader, quiet_trainer
from torch.utils.data import DataLoader, IterableDataset

import statemachine as L
from stages.callbacks.model_summary import ModelSummary
from stages.callbacks.progress import ProgressBar


def batches(n: int) -> DataLoader:
    """A loader of exactly `n` one-sample batches."""
    return make_loader(n=n, batch_size=1)


class Recorder(L.Callback):
    """Counts what the loop did: train batches per epoch, in-fit validations, sanity batches, epoch ends."""

    def __init__(self) -> None:
        self.train_batches: list[tuple[int, int]] = []
        self.validations: list[tuple[int, int]] = []
        self.sanity_batches = 0
        self.sanity_started = False
        self.epoch_ends: list[int] = []
        self.train_ended = False
        self._last_batch = -1

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._last_batch = batch_idx
        self.train_batches.append((trainer.current_epoch, batch_idx))

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._last_batch = -1

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.validations.append((trainer.current_epoch, self._last_batch + 1))

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.sanity_started = True

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        if trainer.sanity_checking:
            self.sanity_batches += 1

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.epoch_ends.append(trainer.current_epoch)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.train_ended = True


class StopAt(L.Callback):
    """Sets `trainer.should_stop` in the named hook (at `batch_idx` for batch hooks)."""

    def __init__(self, hook: str, batch_idx: int = 0) -> None:
        self.hook = hook
        self.batch_idx = batch_idx

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.hook == "on_fit_start":
            trainer.should_stop = True

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.hook == "on_train_start":
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.hook == "on_train_batch_end" and batch_idx == self.batch_idx:
            trainer.should_stop = True


def fit(trainer: L.Trainer, model: L.LightningModule | None = None, val: Any = None, train: Any = None) -> Any:
    model = model or TinyModel()
    trainer.fit(model, train if train is not None else batches(4), val)
    return model


# ---- max_epochs / max_steps / min_* / should_stop --------------------------------------------------------------------


def test_max_epochs_none_defaults_to_1000_with_a_warning(tmp_path: Any) -> None:
    stop = StopAt("on_train_batch_end", batch_idx=0)
    trainer = quiet_trainer(tmp_path, max_epochs=None, callbacks=[stop])
    with pytest.warns(UserWarning, match="max_epochs"):
        fit(trainer)
    assert trainer.max_epochs == 1000
    assert trainer.current_epoch == 1  # should_stop ended the run after the first epoch, not the limit


def test_max_epochs_none_is_unlimited_with_max_steps_or_max_time(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=None, max_steps=10)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*max_epochs", category=UserWarning)  # no "1000 epochs" warning
        fit(trainer)
    assert trainer.max_epochs == -1
    assert (trainer.global_step, trainer.current_epoch) == (10, 3)  # 4 batches/epoch: the steps decide
    assert quiet_trainer(tmp_path, max_epochs=None, max_time={"hours": 1}).max_epochs == -1


def test_max_epochs_none_is_unlimited_with_a_user_timer(tmp_path: Any) -> None:
    stop = StopAt("on_train_batch_end", batch_idx=0)
    trainer = quiet_trainer(tmp_path, max_epochs=None, callbacks=[L.Timer(), stop])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*max_epochs", category=UserWarning)  # not with a Timer either
        fit(trainer)
    assert trainer.max_epochs == -1


def test_max_epochs_minus_one_runs_until_another_limit(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=-1, max_steps=9)
    fit(trainer)
    assert (trainer.global_step, trainer.current_epoch) == (9, 3)  # the stopped third epoch still completes


def test_max_steps_stops_mid_epoch_and_still_runs_the_epoch_end_hooks(tmp_path: Any) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=5, max_steps=6, callbacks=[recorder])
    fit(trainer)
    assert trainer.global_step == 6
    assert recorder.train_batches == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    assert recorder.epoch_ends == [0, 1]  # the stopped epoch still ended
    assert recorder.train_ended
    assert trainer.current_epoch == 2


def test_min_epochs_holds_back_should_stop(tmp_path: Any) -> None:
    recorder = Recorder()
    stop = StopAt("on_train_batch_end", batch_idx=0)
    trainer = quiet_trainer(tmp_path, max_epochs=10, min_epochs=3, callbacks=[stop, recorder])
    fit(trainer)
    # "processed epochs >= min_epochs" is only true after the third epoch, so all three run to the end
    assert [epoch for epoch, _ in recorder.train_batches] == [0] * 4 + [1] * 4 + [2] * 4
    assert (trainer.current_epoch, trainer.global_step) == (3, 12)


def test_min_steps_holds_back_should_stop(tmp_path: Any) -> None:
    stop = StopAt("on_train_batch_end", batch_idx=0)
    trainer = quiet_trainer(tmp_path, max_epochs=10, min_steps=6, callbacks=[stop])
    assert trainer.min_epochs == 1  # min_epochs=None becomes 1 when min_steps is set
    fit(trainer)
    # steps 1..4 in epoch 0 (the minimum of 6 is not met), then epoch 1 stops after its batch 1 (step 6)
    assert trainer.global_step == 6
    assert trainer.current_epoch == 2


def test_should_stop_mid_epoch_with_minimums_met_validates_then_ends_the_epoch(tmp_path: Any) -> None:
    recorder = Recorder()
    stop = StopAt("on_train_batch_end", batch_idx=1)
    trainer = quiet_trainer(tmp_path, max_epochs=10, callbacks=[stop, recorder], num_sanity_val_steps=0)
    fit(trainer, val=batches(2))
    assert trainer.global_step == 2
    assert recorder.validations == [(0, 2)]  # validation runs before the early stop
    assert recorder.epoch_ends == [0]


@pytest.mark.parametrize("hook", ["on_fit_start", "on_train_start"])
def test_should_stop_before_training_with_min_epochs_0_runs_no_epoch(tmp_path: Any, hook: str) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=5, min_epochs=0, callbacks=[StopAt(hook), recorder])
    fit(trainer)
    assert recorder.train_batches == []
    assert recorder.epoch_ends == []
    assert (trainer.current_epoch, trainer.global_step) == (0, 0)
    assert trainer.state.finished
    # fit done before training starts: no on_train_start, so no on_train_end either
    assert recorder.train_ended is (hook == "on_train_start")


def test_fit_resets_should_stop_on_entry(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.should_stop = True
    fit(trainer)
    assert trainer.global_step == 4


# ---- max_time and the Timer ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_time", ["00:00:00:00", timedelta(0), {"seconds": 0}])
def test_max_time_used_up_stops_before_any_epoch(tmp_path: Any, max_time: Any) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=None, max_time=max_time, callbacks=[recorder])
    timers = [c for c in trainer.callbacks if isinstance(c, L.Timer)]
    assert len(timers) == 1
    assert trainer.max_epochs == -1
    fit(trainer)
    assert recorder.train_batches == []
    assert trainer.global_step == 0


class Tick(L.Callback):
    """Advances the fake clock by one second per training batch."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.clock.now += 1.0


@pytest.mark.parametrize("max_time", ["00:00:00:03", timedelta(seconds=3), {"seconds": 3}])
def test_max_time_stops_after_the_step_that_uses_it_up(tmp_path: Any, timer_clock: FakeClock, max_time: Any) -> None:
    clock = timer_clock
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=None, max_time=max_time, callbacks=[Tick(clock), recorder])
    fit(trainer, train=batches(10))
    assert trainer.global_step == 3
    assert recorder.epoch_ends == [0]
    assert recorder.train_ended


def test_max_time_waits_for_min_epochs(tmp_path: Any, timer_clock: FakeClock) -> None:
    clock = timer_clock
    trainer = quiet_trainer(tmp_path, max_epochs=None, min_epochs=2, max_time={"seconds": 1}, callbacks=[Tick(clock)])
    fit(trainer)
    assert (trainer.current_epoch, trainer.global_step) == (2, 8)


# ---- validation scheduling: Lightning's rules, first match decides ---------------------------------------------------


def scheduled(tmp_path: Any, n: int, max_epochs: int = 1, **flags: Any) -> list[tuple[int, int]]:
    recorder = Recorder()
    options: dict[str, Any] = {"limit_val_batches": 1, "num_sanity_val_steps": 0, "max_epochs": max_epochs}
    options.update(flags)
    trainer = quiet_trainer(tmp_path, callbacks=[recorder], **options)
    fit(trainer, train=batches(n), val=batches(2))
    return recorder.validations


def test_validation_defaults_once_per_epoch_after_the_last_batch(tmp_path: Any) -> None:
    assert scheduled(tmp_path, 10, max_epochs=2) == [(0, 10), (1, 10)]


def test_validation_every_quarter_epoch(tmp_path: Any) -> None:
    assert scheduled(tmp_path, 10, val_check_interval=0.25) == [(0, 2), (0, 4), (0, 6), (0, 8), (0, 10)]


def test_validation_every_third_replaces_the_last_batch_default(tmp_path: Any) -> None:
    assert scheduled(tmp_path, 64, val_check_interval=1 / 3) == [(0, 21), (0, 42), (0, 63)]


def test_int_interval_counts_batches_across_epochs_without_check_val_every_n_epoch(tmp_path: Any) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(
        tmp_path,
        callbacks=[recorder],
        max_epochs=4,
        val_check_interval=100,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        num_sanity_val_steps=0,
    )
    fit(trainer, train=batches(30), val=batches(2))
    assert recorder.validations == [(3, 10)]  # run-wide batch 100


def test_int_interval_across_epochs_continues_its_count_after_a_resume(tmp_path: Any) -> None:
    """Run-wide batch 10 of 3-batch epochs is epoch 3's first; a run resumed after epoch 1 validates there too."""
    options: dict[str, Any] = {
        "val_check_interval": 10,
        "check_val_every_n_epoch": None,
        "limit_val_batches": 1,
        "num_sanity_val_steps": 0,
    }
    first = quiet_trainer(tmp_path, max_epochs=2, **options)
    fit(first, train=batches(3), val=batches(2))
    first.save_checkpoint(tmp_path / "two-epochs.ckpt")
    recorder = Recorder()
    resumed = quiet_trainer(tmp_path, max_epochs=4, callbacks=[recorder], **options)
    resumed.fit(TinyModel(), batches(3), batches(2), ckpt_path=tmp_path / "two-epochs.ckpt")
    assert recorder.validations == [(3, 1)]


def test_int_interval_above_the_epoch_length_is_an_error_per_epoch(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="val_check_interval"):
        scheduled(tmp_path, 30, val_check_interval=100, check_val_every_n_epoch=1)
    # 2.6.4 exempts limit_val_batches=0
    assert scheduled(tmp_path, 30, val_check_interval=100, check_val_every_n_epoch=1, limit_val_batches=0) == []


def test_check_val_every_n_epoch_3(tmp_path: Any) -> None:
    assert scheduled(tmp_path, 2, max_epochs=9, check_val_every_n_epoch=3) == [(2, 2), (5, 2), (8, 2)]


def test_check_val_every_n_epoch_must_be_int_or_none(tmp_path: Any) -> None:
    with pytest.raises(L.MisconfigurationException, match="check_val_every_n_epoch"):
        quiet_trainer(tmp_path, check_val_every_n_epoch=0.5)
    with pytest.raises(L.MisconfigurationException, match="val_check_interval"):
        quiet_trainer(tmp_path, check_val_every_n_epoch=None, val_check_interval=0.5)


def test_time_based_interval_zero_validates_after_every_batch(tmp_path: Any) -> None:
    assert scheduled(tmp_path, 4, max_epochs=2, val_check_interval=timedelta(0)) == [
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
    ]
    assert len(scheduled(tmp_path, 3, val_check_interval={"seconds": 0})) == 3


def test_time_based_interval_has_no_automatic_end_of_epoch_run(tmp_path: Any) -> None:
    assert scheduled(tmp_path, 4, max_epochs=2, val_check_interval="00:01:00:00") == []


def test_time_based_interval_follows_the_clock(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    fake_time = SimpleNamespace(monotonic=clock.monotonic)
    monkeypatch.setattr("stages.training.time", fake_time)
    monkeypatch.setattr("stages.evaluation.time", fake_time)
    recorder = Recorder()
    trainer = quiet_trainer(
        tmp_path,
        callbacks=[Tick(clock), recorder],
        val_check_interval=timedelta(seconds=3),
        limit_val_batches=1,
        num_sanity_val_steps=0,
    )
    fit(trainer, train=batches(8), val=batches(2))
    assert recorder.validations == [(0, 3), (0, 6)]  # the clock restarts after every validation


class ValCheckBatchProbe(L.Callback):
    def __init__(self) -> None:
        self.value: Any = "unset"

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.value = trainer.val_check_batch


@pytest.mark.parametrize(
    ("interval", "train", "expected"),
    [(None, 10, 10), (0.25, 10, 2), (1 / 3, 64, 21), (3, 10, 3), (timedelta(hours=1), 10, None), (None, -5, math.inf)],
)
def test_val_check_batch_is_set_at_train_setup(tmp_path: Any, interval: Any, train: int, expected: Any) -> None:
    probe = ValCheckBatchProbe()
    trainer = quiet_trainer(tmp_path, callbacks=[probe], val_check_interval=interval, limit_val_batches=1)
    loader = stream(5) if train < 0 else batches(train)
    fit(trainer, train=loader, val=batches(1))
    assert probe.value == expected


def test_history_records_the_batch_of_every_val_check(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_val_batches=1, num_sanity_val_steps=0, val_check_interval=0.5)
    fit(trainer, val=batches(2))
    checks = [(r.epoch, r.batch_idx) for r in trainer.history if r.trigger == "val_check"]
    assert checks == [(0, 1), (0, 3)]


# ---- limits ----------------------------------------------------------------------------------------------------------


class Stream(IterableDataset):
    """A dataset without `__len__`: a generator of `n` samples."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            x = torch.randn(4, generator=generator)
            yield x, (x[0] > 0).long()


def stream(n: int) -> DataLoader:
    return DataLoader(Stream(n), batch_size=1)


@pytest.mark.parametrize(("limit", "expected"), [(2, 2), (1, 1), (0.5, 5), (1.0, 10), (0.25, 2), (20, 10), (0, 0)])
def test_limit_train_batches_int_and_float(tmp_path: Any, limit: int | float, expected: int) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, limit_train_batches=limit, callbacks=[recorder])
    fit(trainer, train=batches(10))
    assert trainer.num_training_batches == expected
    assert len(recorder.train_batches) == expected
    assert trainer.global_step == expected


@pytest.mark.parametrize(("limit", "expected"), [(3, [3]), (0.5, [2]), (1.0, [5]), (0, [])])
def test_limit_val_batches_in_validate(tmp_path: Any, limit: int | float, expected: list[int]) -> None:
    trainer = quiet_trainer(tmp_path, limit_val_batches=limit)
    results = trainer.validate(TinyModel(), batches(5), verbose=False)
    if expected:
        assert trainer.num_val_batches == expected
        assert set(results[0]) == {"val_loss"}
    else:
        assert results == []


def test_limit_test_and_predict_batches(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_test_batches=2, limit_predict_batches=0.5)
    trainer.test(TinyModel(), batches(5), verbose=False)
    assert trainer.num_test_batches == [2]
    predictions = trainer.predict(TinyModel(), batches(6))
    assert trainer.num_predict_batches == [3]
    assert len(predictions) == 3


def test_limit_errors(tmp_path: Any) -> None:
    with pytest.raises(L.MisconfigurationException, match="limit_train_batches"):
        fit(quiet_trainer(tmp_path, limit_train_batches=0.5), train=stream(8))
    with pytest.raises(L.MisconfigurationException, match=r"0.1 \* 4 < 1.*Try at least `limit_train_batches=0.25`"):
        fit(quiet_trainer(tmp_path, limit_train_batches=0.1))
    for bad in (-1, 1.5, "all"):
        with pytest.raises(L.MisconfigurationException, match="limit_val_batches"):
            quiet_trainer(tmp_path, limit_val_batches=bad)
    assert quiet_trainer(tmp_path, limit_val_batches=5.0).limit_val_batches == 5
    assert isinstance(quiet_trainer(tmp_path, limit_val_batches=5.0).limit_val_batches, int)


def test_unsized_iterables_train_and_validate(tmp_path: Any) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[recorder])
    fit(trainer, train=stream(5), val=stream(3))
    assert trainer.num_training_batches == math.inf
    assert trainer.num_val_batches == [math.inf]
    assert trainer.global_step == 10
    assert recorder.validations == [(0, 5), (1, 5)]  # the last batch is found by exhausting the iterator
    assert recorder.sanity_batches == 2


def test_unsized_iterable_with_an_int_limit(tmp_path: Any) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, limit_train_batches=3, num_sanity_val_steps=0, callbacks=[recorder])
    fit(trainer, train=stream(10), val=stream(2))
    assert trainer.num_training_batches == 3
    assert recorder.validations == [(0, 3)]


def test_unsized_train_loader_with_a_fractional_val_check_interval_is_an_error(tmp_path: Any) -> None:
    with pytest.raises(L.MisconfigurationException, match="val_check_interval"):
        fit(quiet_trainer(tmp_path, val_check_interval=0.5), train=stream(8), val=batches(2))


# ---- overfit_batches and fast_dev_run --------------------------------------------------------------------------------


class SeenBatches(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.train_seen: list[list[float]] = []
        self.val_seen: list[float] = []

    def on_train_epoch_start(self) -> None:
        self.train_seen.append([])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.train_seen[-1].append(float(batch[0][0, 0]))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_seen.append(float(batch[0][0, 0]))
        super().validation_step(batch, batch_idx)


def test_overfit_batches_uses_the_same_first_batches_every_epoch(tmp_path: Any) -> None:
    base = make_loader(n=16, batch_size=2)
    shuffled = DataLoader(base.dataset, batch_size=2, shuffle=True)
    model = SeenBatches()
    trainer = quiet_trainer(tmp_path, max_epochs=3, overfit_batches=3, num_sanity_val_steps=0)
    with pytest.warns(UserWarning, match="overfit_batches"):
        trainer.fit(model, shuffled, batches(6))
    first = [float(x[0, 0]) for x, _ in list(base)[:3]]
    assert model.train_seen == [first, first, first]
    assert trainer.num_training_batches == 3
    assert trainer.num_val_batches == [3]  # the val limit becomes overfit_batches too
    assert len(model.val_seen) == 9


def test_overfit_batches_fraction(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, overfit_batches=0.5, num_sanity_val_steps=0)
    fit(trainer, train=batches(8), val=batches(4))
    assert trainer.num_training_batches == 4
    assert trainer.num_val_batches == [2]


@pytest.mark.parametrize("runs", [1, 3])
def test_fast_dev_run(tmp_path: Any, runs: int) -> None:
    recorder = Recorder()
    # max_epochs is left unset: fast_dev_run bounds the run itself, so there is no "1000 epochs" warning
    # (which the suite would turn into an error).
    trainer = L.Trainer(
        fast_dev_run=runs,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
    )
    if runs == 1:
        assert trainer.fast_dev_run is True
    else:
        assert trainer.fast_dev_run == runs
    assert (trainer.max_steps, trainer.max_epochs, trainer.num_sanity_val_steps) == (runs, 1, 0)
    model = TinyModel()
    trainer.fit(model, batches(10), batches(10))
    assert len(recorder.train_batches) == runs
    assert trainer.global_step == runs
    assert not recorder.sanity_started
    assert recorder.validations == [(0, runs)]
    assert trainer.num_val_batches == [runs]
    assert trainer.test(model, batches(10), verbose=False)
    assert trainer.num_test_batches == [runs]
    assert len(trainer.predict(model, batches(10))) == runs
    files = [name for _, _, names in os.walk(tmp_path) for name in names]
    assert not [name for name in files if name.endswith(".ckpt")]
    assert not any(isinstance(logger, L.TensorBoardLogger) for logger in trainer.loggers)
    assert not (tmp_path / "lightning_logs").exists()


def test_fast_dev_run_has_no_best_checkpoint(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, fast_dev_run=True, enable_checkpointing=True)
    model = TinyModel()
    trainer.fit(model, batches(2))
    with pytest.raises(ValueError, match="best"):
        trainer.test(model, batches(2), ckpt_path="best", verbose=False)


def test_fast_dev_run_1_is_stored_as_true_and_negative_is_an_error(tmp_path: Any) -> None:
    assert quiet_trainer(tmp_path, fast_dev_run=1).fast_dev_run is True
    with pytest.raises(L.MisconfigurationException, match="fast_dev_run"):
        quiet_trainer(tmp_path, fast_dev_run=-1)


# ---- dataloader reloading and the sanity check -----------------------------------------------------------------------


class CountingLoaders(TinyModel):
    def __init__(self, val_batches: int = 2) -> None:
        super().__init__()
        self.requests = {"train": 0, "val": 0}
        self.val_batches = val_batches

    def train_dataloader(self) -> DataLoader:
        self.requests["train"] += 1
        return batches(2)

    def val_dataloader(self) -> DataLoader:
        self.requests["val"] += 1
        return batches(self.val_batches)


@pytest.mark.parametrize(("every", "expected"), [(0, 1), (1, 3), (2, 2)])
def test_reload_dataloaders_every_n_epochs(tmp_path: Any, every: int, expected: int) -> None:
    model = CountingLoaders()
    trainer = quiet_trainer(tmp_path, max_epochs=3, reload_dataloaders_every_n_epochs=every)
    trainer.fit(model)
    assert model.requests == {"train": expected, "val": expected}


@pytest.mark.parametrize(("steps", "expected"), [(-1, 5), (0, 0), (2, 2), (None, 2), (9, 5)])
def test_num_sanity_val_steps(tmp_path: Any, steps: int | None, expected: int) -> None:
    recorder = Recorder()
    trainer = quiet_trainer(tmp_path, num_sanity_val_steps=steps, callbacks=[recorder], limit_train_batches=1)
    fit(trainer, val=batches(5))
    assert recorder.sanity_batches == expected
    assert recorder.sanity_started is (expected > 0)
    if expected:
        assert trainer.num_sanity_val_batches == [expected]
    assert recorder.validations == [(0, 1)]


def test_num_sanity_val_steps_minus_one_reads_back_as_inf(tmp_path: Any) -> None:
    assert quiet_trainer(tmp_path, num_sanity_val_steps=-1).num_sanity_val_steps == math.inf
    assert quiet_trainer(tmp_path, num_sanity_val_steps=3).num_sanity_val_steps == 3


# ---- grad, anomaly and determinism modes -----------------------------------------------------------------------------


class ModeProbe(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.val_modes: list[tuple[bool, bool]] = []
        self.anomaly: list[bool] = []
        self.train_grad: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.anomaly.append(torch.is_anomaly_enabled())
        self.train_grad.append(torch.is_grad_enabled())
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        super().validation_step(batch, batch_idx)


@pytest.mark.parametrize(("inference_mode", "expected"), [(True, (True, False)), (False, (False, False))])
def test_inference_mode_in_validate(tmp_path: Any, inference_mode: bool, expected: tuple[bool, bool]) -> None:
    model = ModeProbe()
    quiet_trainer(tmp_path, inference_mode=inference_mode).validate(model, batches(2), verbose=False)
    assert model.val_modes == [expected, expected]


def test_validation_inside_fit_uses_no_grad_never_inference_mode(tmp_path: Any) -> None:
    model = ModeProbe()
    trainer = quiet_trainer(tmp_path, inference_mode=True, num_sanity_val_steps=1, limit_val_batches=1)
    trainer.fit(model, batches(2), batches(2))
    assert model.val_modes == [(False, False), (False, False)]  # sanity check, then the epoch's validation
    assert model.train_grad == [True, True]


@pytest.mark.parametrize("detect", [True, False])
def test_detect_anomaly(tmp_path: Any, detect: bool) -> None:
    model = ModeProbe()
    before = torch.is_anomaly_enabled()
    quiet_trainer(tmp_path, detect_anomaly=detect).fit(model, batches(2))
    assert model.anomaly == [detect, detect]
    assert torch.is_anomaly_enabled() == before


def test_deterministic_sets_torch_deterministic_algorithms(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    benchmark = torch.backends.cudnn.benchmark
    try:
        torch.use_deterministic_algorithms(False)
        quiet_trainer(tmp_path, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.benchmark is False
        quiet_trainer(tmp_path, deterministic="warn")
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        quiet_trainer(tmp_path, deterministic=False)
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.backends.cudnn.benchmark = benchmark


# ---- barebones and environment defaults ------------------------------------------------------------------------------


def test_barebones_turns_everything_off(tmp_path: Any) -> None:
    recorder = Recorder()
    trainer = L.Trainer(barebones=True, max_epochs=1, default_root_dir=str(tmp_path), callbacks=[recorder])
    assert trainer.logger is None and trainer.loggers == []
    kinds = (L.Checkpoint, ProgressBar, ModelSummary)
    assert not [c for c in trainer.callbacks if isinstance(c, kinds)]
    assert (trainer.num_sanity_val_steps, trainer.log_every_n_steps) == (0, 0)
    with pytest.warns(UserWarning, match=r"`Trainer\(barebones=True\)` is configured"):  # the model's self.log
        fit(trainer, val=batches(2))
    assert not recorder.sanity_started
    assert recorder.validations == [(0, 4)]
    assert not any(files for _, _, files in os.walk(tmp_path))


@pytest.mark.parametrize(
    "flag",
    [
        {"enable_checkpointing": True},
        {"enable_progress_bar": True},
        {"enable_model_summary": True},
        {"logger": True},
        {"log_every_n_steps": 1},
        {"num_sanity_val_steps": 2},
        {"fast_dev_run": 1},
        {"detect_anomaly": True},
    ],
)
def test_barebones_refuses_explicit_conflicts(flag: dict[str, Any]) -> None:
    (name,) = flag
    with pytest.raises(ValueError, match=rf"`Trainer\(barebones=True, {name}=.+\)` was passed\. .+ in barebones mode"):
        L.Trainer(barebones=True, **flag)


def test_barebones_says_what_it_turns_off_and_ignores_self_log(tmp_path: Any, caplog: Any) -> None:
    class Logs(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self.layer(batch[0]).sum()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with caplog.at_level(logging.INFO):
        trainer = L.Trainer(barebones=True, max_epochs=1, default_root_dir=str(tmp_path))
    assert "You are running in `Trainer(barebones=True)` mode." in caplog.text
    assert " - Logging: `Trainer(logger=True)`, `Trainer(log_every_n_steps>0)`" in caplog.text
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
    with pytest.warns(UserWarning, match=r"`self.log\(\)` but `Trainer\(barebones=True\)` is configured"):
        trainer.fit(Logs(), data)
    assert trainer.callback_metrics == {} and trainer.global_step == 2


@pytest.mark.parametrize("flag", [{"enable_checkpointing": False}, {"logger": False}, {"num_sanity_val_steps": 0}])
def test_barebones_accepts_explicitly_off_flags(flag: dict[str, Any]) -> None:
    assert L.Trainer(barebones=True, **flag).barebones


def test_env_defaults(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "7")
    monkeypatch.setenv("PL_TRAINER_DEFAULT_ROOT_DIR", str(tmp_path))  # a raw string, not a literal
    monkeypatch.setenv("PL_TRAINER_NOT_A_FLAG", "1")  # unknown names are ignored
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "")  # empty values are ignored
    trainer = L.Trainer(enable_progress_bar=False)
    assert trainer.logger is None
    assert trainer.max_steps == 7
    assert trainer.default_root_dir == str(tmp_path)
    assert trainer.max_epochs == -1  # max_steps is set, so max_epochs=None is unlimited
    trainer.fit(TinyModel(), batches(4))
    assert trainer.global_step == 7


def test_env_defaults_lose_to_explicit_arguments(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "7")
    logger = L.CSVLogger(str(tmp_path))
    trainer = L.Trainer(logger=logger, max_steps=42)
    assert trainer.logger is logger
    assert trainer.max_steps == 42


def test_env_defaults_follow_the_subclass_name(monkeypatch: pytest.MonkeyPatch) -> None:
    class MyTrainer(L.Trainer):
        pass

    monkeypatch.setenv("PL_MYTRAINER_MAX_STEPS", "3")
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "5")
    assert MyTrainer(logger=False).max_steps == 3


# ---- argument errors and refused flags -------------------------------------------------------------------------------


def test_one_error_names_every_bad_field() -> None:
    with pytest.raises(L.MisconfigurationException) as info:
        L.Trainer(max_epochs=-5, accumulate_grad_batches=0, gradient_clip_algorithm="bad", limit_val_batches=-2)
    message = str(info.value)
    for field in ("max_epochs", "accumulate_grad_batches", "gradient_clip_algorithm", "limit_val_batches"):
        assert field in message
    assert "-5" in message and "'bad'" in message
    assert isinstance(info.value, ValueError)


# ---- several loaders -------------------------------------------------------------------------------------------------


class MultiLoaderModel(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int, int]] = []

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(("val", dataloader_idx, batch_idx))
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y) + dataloader_idx)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(("test", dataloader_idx, batch_idx))
        self.log("test_value", float(dataloader_idx + 1))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        self.seen.append(("predict", dataloader_idx, batch_idx))
        return dataloader_idx


def test_several_val_test_and_predict_loaders(tmp_path: Any) -> None:
    model = MultiLoaderModel()
    trainer = quiet_trainer(tmp_path)
    results = trainer.validate(model, [batches(2), batches(3)], verbose=False)
    assert trainer.num_val_batches == [2, 3]
    assert [sorted(r) for r in results] == [["val_loss/dataloader_idx_0"], ["val_loss/dataloader_idx_1"]]
    assert results[1]["val_loss/dataloader_idx_1"] == pytest.approx(results[0]["val_loss/dataloader_idx_0"] + 1, 0.5)
    assert model.seen == [("val", 0, 0), ("val", 0, 1), ("val", 1, 0), ("val", 1, 1), ("val", 1, 2)]
    assert len(trainer.val_dataloaders) == 2

    results = trainer.test(model, {"a": batches(1), "b": batches(2)}, verbose=False)
    assert results == [{"test_value/dataloader_idx_0": 1.0}, {"test_value/dataloader_idx_1": 2.0}]
    assert trainer.num_test_batches == [1, 2]
    assert set(trainer.test_dataloaders) == {"a", "b"}

    predictions = trainer.predict(model, [batches(2), batches(1)])
    assert predictions == [[0, 0], [1]]
    assert trainer.num_predict_batches == [2, 1]
    assert len(trainer.predict_dataloaders) == 2


def test_one_loader_gets_no_dataloader_idx(tmp_path: Any) -> None:
    class Strict(TinyModel):
        def validation_step(self, batch: Any, batch_idx: int) -> None:  # would fail with a third argument
            super().validation_step(batch, batch_idx)

    results = quiet_trainer(tmp_path).validate(Strict(), [batches(2)], verbose=False)
    assert list(results[0]) == ["val_loss"]


class CombinedModel(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batches.append(batch)
        parts = list(batch.values()) if isinstance(batch, dict) else batch
        return sum(super(CombinedModel, self).training_step(part, batch_idx) for part in parts)


def test_a_list_of_train_loaders_cycles_to_the_longest(tmp_path: Any) -> None:
    model = CombinedModel()
    trainer = quiet_trainer(tmp_path)
    long, short = make_loader(n=4, batch_size=1, seed=1), make_loader(n=2, batch_size=1, seed=2)
    trainer.fit(model, [long, short])
    assert trainer.num_training_batches == 4
    assert trainer.global_step == 4
    assert all(isinstance(batch, list) and len(batch) == 2 for batch in model.batches)
    shorts = [float(batch[1][0][0, 0]) for batch in model.batches]
    assert shorts[0] == shorts[2] and shorts[1] == shorts[3] and shorts[0] != shorts[1]  # the short one cycles
    longs = [float(batch[0][0][0, 0]) for batch in model.batches]
    assert longs == [float(x[0, 0]) for x, _ in long]


def test_a_dict_of_train_loaders_gives_dict_batches(tmp_path: Any) -> None:
    model = CombinedModel()
    trainer = quiet_trainer(tmp_path)
    trainer.fit(model, {"a": batches(3), "b": batches(5)})
    assert trainer.num_training_batches == 5
    assert [sorted(batch) for batch in model.batches] == [["a", "b"]] * 5


# ---- the training step -----------------------------------------------------------------------------------------------


class EndEpochAt(TinyModel):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.steps: list[tuple[int, int]] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx == self.at else None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps.append((self.current_epoch, batch_idx))
        return super().training_step(batch, batch_idx)


def test_on_train_batch_start_minus_one_ends_the_epoch(tmp_path: Any) -> None:
    recorder = Recorder()
    model = EndEpochAt(2)
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[recorder], num_sanity_val_steps=0)
    trainer.fit(model, batches(5), batches(1))
    assert model.steps == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert recorder.train_batches == [(0, 0), (0, 1), (1, 0), (1, 1)]  # no on_train_batch_end for batch 2
    assert recorder.epoch_ends == [0, 1]
    assert recorder.validations == []  # the -1 batch gets no validation check
    assert trainer.global_step == 4
    assert trainer.current_epoch == 2


class SometimesNone(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        loss = super().training_step(batch, batch_idx)
        return loss if batch_idx % 2 else None

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.outputs.append(outputs)


def test_training_step_returning_none_skips_the_update_with_a_warning(tmp_path: Any) -> None:
    model = SometimesNone()
    trainer = quiet_trainer(tmp_path)
    with pytest.warns(UserWarning, match="None"):
        trainer.fit(model, batches(4))
    assert [out == {} for out in model.outputs] == [True, False, True, False]
    assert set(model.outputs[1]) == {"loss"}
    assert trainer.global_step == 4  # Lightning still calls optimizer_step, which counts


def test_training_step_returning_none_leaves_the_weights_alone(tmp_path: Any) -> None:
    class AlwaysNone(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            return None

    model = AlwaysNone()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.warns(UserWarning, match="None"):
        quiet_trainer(tmp_path).fit(model, batches(3))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_training_step_dict_without_loss_is_an_error(tmp_path: Any) -> None:
    class NoLoss(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            return {"value": super().training_step(batch, batch_idx)}

    with pytest.raises(L.MisconfigurationException, match="loss"):
        quiet_trainer(tmp_path).fit(NoLoss(), batches(2))


def test_training_step_dict_with_loss_passes_the_other_keys(tmp_path: Any) -> None:
    class WithExtra(SometimesNone):
        def training_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            return {"loss": TinyModel.training_step(self, batch, batch_idx), "extra": batch_idx}

    model = WithExtra()
    quiet_trainer(tmp_path).fit(model, batches(2))
    assert [out["extra"] for out in model.outputs] == [0, 1]
    assert all(not out["loss"].requires_grad for out in model.outputs)


class StepRecorder(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.stepped_at: list[int] = []
        self.stepping_batches: Any = None

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.stepped_at.append(batch_idx)
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        self.stepping_batches = self.trainer.estimated_stepping_batches
        return super().configure_optimizers()


def test_accumulate_grad_batches_3_with_7_batches_steps_3_times(tmp_path: Any) -> None:
    model = StepRecorder()
    trainer = quiet_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=3)
    trainer.fit(model, batches(7))
    assert model.stepped_at == [2, 5, 6, 2, 5, 6]
    assert trainer.global_step == 6


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"max_epochs": 2, "accumulate_grad_batches": 3}, 6),
        ({"max_epochs": 2}, 14),
        ({"max_epochs": 5, "max_steps": 4}, 4),
        ({"max_epochs": 3, "limit_train_batches": 4, "accumulate_grad_batches": 2}, 6),
    ],
)
def test_estimated_stepping_batches(tmp_path: Any, flags: dict[str, Any], expected: int) -> None:
    model = StepRecorder()
    trainer = quiet_trainer(tmp_path, **flags)
    trainer.fit(model, batches(7))
    assert trainer.estimated_stepping_batches == expected
    assert trainer.global_step == expected


def test_estimated_stepping_batches_in_configure_optimizers(tmp_path: Any) -> None:
    """Lightning loads the train loader on demand, so OneCycleLR-style schedulers can size themselves."""
    model = StepRecorder()
    quiet_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=3).fit(model, batches(7))
    assert model.stepping_batches == 6


def test_estimated_stepping_batches_unlimited_is_inf(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=-1, max_steps=-1, callbacks=[StopAt("on_train_batch_end")])
    fit(trainer)
    assert trainer.estimated_stepping_batches == math.inf


# ---- read-only properties --------------------------------------------------------------------------------------------


class PropertyProbe(L.Callback):
    def __init__(self) -> None:
        self.last_flags: list[bool] = []
        self.during_fit: dict[str, Any] = {}

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.last_flags.append(trainer.is_last_batch)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.during_fit = {
            "num_training_batches": trainer.num_training_batches,
            "train_dataloader": trainer.train_dataloader,
            "optimizers": list(trainer.optimizers),
            "schedulers": [config.scheduler for config in trainer.lr_scheduler_configs],
        }


class WithScheduler(TinyModel):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def test_trainer_properties(tmp_path: Any) -> None:
    probe = PropertyProbe()
    trainer = quiet_trainer(tmp_path, callbacks=[probe], num_sanity_val_steps=1)
    assert (trainer.precision, trainer.world_size, trainer.global_rank, trainer.local_rank) == ("32-true", 1, 0, 0)
    assert trainer.is_global_zero is True
    assert (trainer.num_devices, trainer.device_ids) == (1, [0])

    model = WithScheduler()
    train, val = batches(3), batches(2)
    trainer.fit(model, train, val)
    assert probe.last_flags == [False, False, True]
    assert probe.during_fit["num_training_batches"] == 3
    assert probe.during_fit["train_dataloader"] is train
    (optimizer,) = probe.during_fit["optimizers"]
    assert isinstance(optimizer, torch.optim.SGD)
    (scheduler,) = probe.during_fit["schedulers"]
    assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR)
    assert trainer.optimizers == [optimizer]
    assert trainer.lr_scheduler_configs[0].interval == "step"
    assert trainer.num_training_batches == 3
    assert trainer.num_val_batches == [2]
    assert trainer.num_sanity_val_batches == [1]
    assert trainer.val_dataloaders is val
    assert trainer.is_last_batch is True

    test_loader = batches(4)
    trainer.test(model, test_loader, verbose=False)
    assert trainer.num_test_batches == [4]
    assert trainer.test_dataloaders is test_loader
    predict_loader = batches(5)
    trainer.predict(model, predict_loader)
    assert trainer.num_predict_batches == [5]
    assert trainer.predict_dataloaders is predict_loader
