"""TQDMProgressBar as Lightning's: its bars and their init_* hooks, totals, descriptions, print, refresh rate and the
Trainer's checks, driven by real runs (on a fake terminal where the bars must draw)."""

from __future__ import annotations

import io
import pickle
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import statemachine as L
from statemachine.callbacks import ProgressBar, TQDMProgressBar
from statemachine.callbacks.progress.progress_bar import get_standard_metrics
from statemachine.callbacks.progress.tqdm_progress import Tqdm
from statemachine.utilities.exceptions import MisconfigurationException
from tests.conftest import TinyModel, make_loader, quiet_trainer


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _use_terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    # called from the test body: pytest's output capture re-installs sys.stdout after fixtures have run
    screen = _Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    return screen


class _Unsized(IterableDataset):
    """A loader without a length: its bar counts without a total."""

    def __iter__(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        for _ in range(4):
            x = torch.randn(4, generator=generator)
            yield x, (x[0] > 0).long()


class BarModel(TinyModel):
    """Logs to the bar, prints from its steps, and takes a list of val/test/predict loaders."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("shown", loss, prog_bar=True)
        self.log("three", 3.0, prog_bar=True)
        if batch_idx == 0:
            self.print("from", "training_step", sep="-")
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        super().test_step(batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return super().predict_step(batch, batch_idx)


class RecordingBar(TQDMProgressBar):
    """Counts the bars its init_* hooks made, styles each, and notes the totals it saw."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.made: list[tuple[str, Tqdm]] = []
        self.seen: list[tuple[Any, ...]] = []

    def _made(self, kind: str, bar: Tqdm) -> Tqdm:
        bar.colour = "green"
        self.made.append((kind, bar))
        return bar

    def init_sanity_tqdm(self) -> Tqdm:
        return self._made("sanity", super().init_sanity_tqdm())

    def init_train_tqdm(self) -> Tqdm:
        return self._made("train", super().init_train_tqdm())

    def init_validation_tqdm(self) -> Tqdm:
        return self._made("validation", super().init_validation_tqdm())

    def init_test_tqdm(self) -> Tqdm:
        return self._made("test", super().init_test_tqdm())

    def init_predict_tqdm(self) -> Tqdm:
        return self._made("predict", super().init_predict_tqdm())

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        bar = self.train_progress_bar
        self.seen.append(("train", self.total_train_batches, self.total_val_batches, bar.total, bar.desc))

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        super().on_validation_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        if batch_idx == 0:
            bar = self.val_progress_bar
            self.seen.append(("val", self.total_val_batches_current_dataloader, bar.total, bar.desc))

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        super().on_test_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        if batch_idx == 0:
            bar = self.test_progress_bar
            self.seen.append(("test", self.total_test_batches_current_dataloader, bar.total, bar.desc))

    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        super().on_predict_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        if batch_idx == 0:
            bar = self.predict_progress_bar
            self.seen.append(("predict", self.total_predict_batches_current_dataloader, bar.total, bar.desc))


def _bar_trainer(tmp_path: Any, bar: ProgressBar, **kwargs: Any) -> L.Trainer:
    options: dict[str, Any] = {"enable_progress_bar": True, "callbacks": [bar], "num_sanity_val_steps": 2}
    options.update(kwargs)
    return quiet_trainer(tmp_path, **options)


def _two_loaders() -> list[DataLoader]:
    return [make_loader(n=24), DataLoader(_Unsized(), batch_size=2)]


# ---- the bars and the init_* hooks -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["train_progress_bar", "val_progress_bar", "test_progress_bar", "predict_progress_bar"]
)
def test_a_bar_read_before_it_exists_raises_type_error(name: str) -> None:
    bar = TQDMProgressBar()
    with pytest.raises(TypeError, match=f"The `TQDMProgressBar._{name}` reference has not been set yet."):
        getattr(bar, name)
    replacement = Tqdm(disable=True)
    setattr(bar, name, replacement)
    assert getattr(bar, name) is replacement


def test_the_trainer_read_before_setup_raises_type_error() -> None:
    with pytest.raises(TypeError, match="The `TQDMProgressBar._trainer` reference has not been set yet."):
        _ = TQDMProgressBar().total_train_batches


def test_every_bar_is_made_by_its_init_hook(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _use_terminal(monkeypatch)
    bar = RecordingBar()
    trainer = _bar_trainer(tmp_path, bar, max_epochs=2)
    model = BarModel()
    trainer.fit(model, make_loader(), make_loader(n=16))
    trainer.validate(model, make_loader(n=16))
    trainer.test(model, make_loader(n=16))
    trainer.predict(model, make_loader(n=16))
    kinds = [kind for kind, _ in bar.made]
    assert kinds == ["sanity", "train", "validation", "validation", "validation", "test", "predict"]
    made = dict(bar.made)
    assert bar.test_progress_bar is made["test"] and bar.predict_progress_bar is made["predict"]
    assert all(made_bar.colour == "green" for _, made_bar in bar.made)
    assert "\x1b[32m" in screen.getvalue()  # the override's colour is drawn


def test_the_bars_positions_and_what_they_leave(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    bar = RecordingBar(process_position=1)
    trainer = _bar_trainer(tmp_path, bar)
    model = BarModel()
    trainer.fit(model, make_loader(), make_loader(n=16))
    trainer.validate(model, make_loader(n=16))
    placed = [(kind, abs(made.pos), made.leave) for kind, made in bar.made]
    # under fit the validation bar sits on the line below the epoch's bar and goes; a validate run's stays
    assert placed == [("sanity", 2, False), ("train", 2, True), ("validation", 3, False), ("validation", 2, True)]


def test_leave_makes_a_bar_per_epoch_and_closes_each(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    kept = RecordingBar(leave=True)
    _bar_trainer(tmp_path, kept, max_epochs=2, num_sanity_val_steps=0).fit(BarModel(), make_loader())
    epoch_bars = [made for kind, made in kept.made if kind == "train"]
    assert len(epoch_bars) == 3  # on_train_start's, then one per epoch
    assert epoch_bars[1].disable and epoch_bars[2].disable  # closed at their epoch's end

    replaced = RecordingBar()
    _bar_trainer(tmp_path, replaced, max_epochs=2, num_sanity_val_steps=0).fit(BarModel(), make_loader())
    assert [kind for kind, _ in replaced.made] == ["train"]  # one bar, reset each epoch


# ---- totals ------------------------------------------------------------------------------------------


def test_totals_and_descriptions_per_dataloader(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    bar = RecordingBar()
    trainer = _bar_trainer(tmp_path, bar)
    model = BarModel()
    trainer.fit(model, make_loader(), _two_loaders())
    trainer.test(model, [make_loader(n=16), make_loader(n=8)])
    trainer.predict(model, _two_loaders())
    inf = float("inf")
    assert bar.seen == [
        ("val", 2, 2, "Sanity Checking DataLoader 0: "),
        ("val", 2, 2, "Sanity Checking DataLoader 1: "),
        ("train", 4, inf, 4, "Epoch 0: "),
        ("val", 3, 3, "Validation DataLoader 0: "),
        ("val", inf, None, "Validation DataLoader 1: "),  # no length: a counter without a total
        ("test", 2, 2, "Testing DataLoader 0: "),
        ("test", 1, 1, "Testing DataLoader 1: "),
        ("predict", 3, 3, "Predicting DataLoader 0: "),
        ("predict", inf, None, "Predicting DataLoader 1: "),
    ]


def test_total_train_batches_counts_the_steps_left_under_max_steps(tmp_path: Any) -> None:
    bar = RecordingBar()
    _bar_trainer(tmp_path, bar, max_epochs=-1, max_steps=6, num_sanity_val_steps=0).fit(BarModel(), make_loader())
    assert [seen[1] for seen in bar.seen] == [4, 2]


def test_total_val_batches_is_zero_in_an_epoch_without_validation(tmp_path: Any) -> None:
    bar = RecordingBar()
    trainer = _bar_trainer(tmp_path, bar, max_epochs=2, check_val_every_n_epoch=2, num_sanity_val_steps=0)
    trainer.fit(BarModel(), make_loader(), make_loader(n=16))
    # Epoch 1 validates, but as in Lightning its loader is requested by that validation, after the bar was sized.
    assert [seen[2] for seen in bar.seen if seen[0] == "train"] == [0, 0]


@pytest.mark.parametrize(
    "name",
    [
        "total_val_batches_current_dataloader",
        "total_test_batches_current_dataloader",
        "total_predict_batches_current_dataloader",
    ],
)
def test_a_current_dataloader_total_needs_a_running_dataloader(tmp_path: Any, name: str) -> None:
    bar = TQDMProgressBar()
    _bar_trainer(tmp_path, bar).fit(BarModel(), make_loader())
    with pytest.raises(AssertionError, match=name):
        getattr(bar, name)


# ---- what is drawn -----------------------------------------------------------------------------------


def test_a_fit_draws_lightnings_descriptions_and_postfix(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _use_terminal(monkeypatch)
    logger = L.CSVLogger(str(tmp_path), version=0)
    trainer = _bar_trainer(tmp_path, TQDMProgressBar(), max_epochs=2, logger=logger, log_every_n_steps=1)
    trainer.fit(BarModel(), make_loader(), make_loader(n=16))
    drawn = screen.getvalue()
    for text in ("Sanity Checking DataLoader 0:", "Epoch 0:", "Epoch 1:", "Validation DataLoader 0:", "4/4 ["):
        assert text in drawn
    assert "it/s, v_num=0, shown=" in drawn
    assert ", three=3.000" in drawn  # floats are padded to a steady width
    assert ", val_loss=" in drawn  # validation's result lands on the epoch's bar
    assert "loss=" not in drawn.replace("val_loss=", "")  # the step's loss is shown only when logged to the bar


def test_refresh_rate_limits_redraws_but_the_last_batch_always_shows(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_terminal(monkeypatch)
    seen: list[int] = []

    class Watching(TQDMProgressBar):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            seen.append(self.train_progress_bar.n)

    _bar_trainer(tmp_path, Watching(refresh_rate=2), num_sanity_val_steps=0).fit(BarModel(), make_loader(n=40))
    assert seen == [0, 2, 2, 4, 5]


def test_off_a_terminal_the_bars_stay_silent(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    captured = io.StringIO()  # isatty() is False, like CI logs and pytest's capture
    monkeypatch.setattr(sys, "stdout", captured)
    monkeypatch.setattr(sys, "stderr", captured)
    bar = TQDMProgressBar()
    trainer = _bar_trainer(tmp_path, bar)
    trainer.fit(TinyModel(), make_loader(), make_loader(n=16))
    trainer.test(TinyModel(), make_loader(n=16), verbose=False)
    assert bar.is_enabled and bar.train_progress_bar.disable and bar.test_progress_bar.disable
    assert captured.getvalue() == ""


def test_tqdm_pads_float_and_text_values() -> None:
    shown = [Tqdm.format_num(value) for value in (1.59, 3.0, 0.0571, 1e-5, 7, "efgh", "12")]
    assert shown == ["1.590", "3.000", "0.0571", "1e-5", "7", "efgh", "12.00"]


# ---- print -------------------------------------------------------------------------------------------


def test_module_print_writes_above_the_drawing_bar(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _use_terminal(monkeypatch)
    written: list[str] = []
    bar = TQDMProgressBar()
    trainer = _bar_trainer(tmp_path, bar, num_sanity_val_steps=0)
    original_write = Tqdm.write

    def spy(text: str, **kwargs: Any) -> None:
        written.append(text)
        original_write(text, **kwargs)

    monkeypatch.setattr(Tqdm, "write", staticmethod(spy))
    trainer.fit(BarModel(), make_loader())
    assert written == ["from-training_step"]
    drawn = screen.getvalue()
    # tqdm clears the bar's line, writes the text on its own line and draws the bar again below it
    before, after = drawn.split("from-training_step\n")
    assert before.endswith("\r") and "Epoch 0:" in after


def test_print_without_a_drawing_bar_is_a_plain_print(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bar = TQDMProgressBar()
    bar.print("before", "any bar", sep="|")
    _bar_trainer(tmp_path, bar, num_sanity_val_steps=0).fit(BarModel(), make_loader())  # off a terminal
    quiet_trainer(tmp_path).fit(BarModel(), make_loader())  # no bar at all
    assert capsys.readouterr().out == "before|any bar\nfrom-training_step\nfrom-training_step\n"


# ---- refresh rate, enabling ----------------------------------------------------------------------------


def test_tqdm_miniters_raises_the_refresh_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TQDM_MINITERS", "7")
    assert [TQDMProgressBar(refresh_rate=rate).refresh_rate for rate in (0, 1, 10)] == [7, 7, 10]
    monkeypatch.setenv("TQDM_MINITERS", "often")
    with pytest.raises(ValueError, match="invalid literal for int\\(\\) with base 10: 'often'.*TQDM_MINITERS"):
        TQDMProgressBar()


def test_colab_redraws_every_20_batches_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLAB_GPU", "1")
    monkeypatch.setenv("TQDM_MINITERS", "30")
    assert TQDMProgressBar().refresh_rate == 20
    assert TQDMProgressBar(refresh_rate=2).refresh_rate == 30
    monkeypatch.setenv("COLAB_GPU", "")
    monkeypatch.delenv("TQDM_MINITERS")
    assert TQDMProgressBar().refresh_rate == 1


def test_enable_disable_and_refresh_rate_zero() -> None:
    bar = TQDMProgressBar(process_position=2, leave=True)
    assert (bar.is_enabled, bar.is_disabled, bar.process_position) == (True, False, 2)
    bar.disable()
    assert (bar.is_enabled, bar.is_disabled) == (False, True)
    bar.enable()
    assert bar.is_enabled
    assert TQDMProgressBar(refresh_rate=0).is_disabled


def test_only_global_rank_zero_shows_a_bar() -> None:
    other_rank = SimpleNamespace(is_global_zero=False)
    bar = TQDMProgressBar()
    bar.setup(other_rank, None, "fit")
    assert bar.is_disabled and bar.trainer is other_rank
    rich = L.RichProgressBar()
    rich.setup(other_rank, None, "fit")
    assert rich.is_disabled


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"refresh_rate": -1}, "refresh_rate -1 must be an int >= 0"),
        ({"refresh_rate": 1.5}, "refresh_rate 1.5 must be an int >= 0"),
        ({"process_position": -2}, "process_position -2 must be an int >= 0"),
        ({"leave": 1}, "leave 1 must be a bool"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TQDMProgressBar(**kwargs)


def test_a_bar_pickles_without_its_tqdm_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    bar = TQDMProgressBar(refresh_rate=3)
    bar.on_train_start(None, None)
    assert not bar.train_progress_bar.disable  # drawing, holding its stream and lock
    copy = pickle.loads(pickle.dumps(bar))
    assert copy.refresh_rate == 3
    with pytest.raises(TypeError, match="_train_progress_bar"):
        _ = copy.train_progress_bar


# ---- get_metrics -------------------------------------------------------------------------------------


def _logged(*versions: Any, metrics: dict[str, float] | None = None) -> SimpleNamespace:
    loggers = [SimpleNamespace(version=version) for version in versions]
    return SimpleNamespace(loggers=loggers, progress_bar_metrics=metrics or {})


def test_v_num_is_the_loggers_version() -> None:
    assert get_standard_metrics(_logged(3)) == {"v_num": 3}
    assert get_standard_metrics(_logged("2024_05_01-abcd")) == {"v_num": "abcd"}  # a str shows its last 4
    assert get_standard_metrics(_logged(1, 2, 1)) == {"v_num": "1_2"}  # distinct versions joined
    assert get_standard_metrics(_logged("")) == {} and get_standard_metrics(_logged(None)) == {}
    assert get_standard_metrics(_logged()) == {}


def test_get_metrics_adds_the_bar_metrics_and_warns_when_one_hides_v_num() -> None:
    assert TQDMProgressBar().get_metrics(_logged(0, metrics={"acc": 0.5}), None) == {"v_num": 0, "acc": 0.5}
    hidden = "The progress bar already tracks a metric with the name\\(s\\) 'v_num'"
    with pytest.warns(UserWarning, match=hidden):
        assert ProgressBar().get_metrics(_logged(0, metrics={"v_num": 9.0}), None) == {"v_num": 9.0}


def test_a_run_shows_v_num_and_the_prog_bar_metrics(tmp_path: Any) -> None:
    shown: list[dict[str, Any]] = []

    class Watching(TQDMProgressBar):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            super().on_train_epoch_end(trainer, pl_module)
            shown.append(self.get_metrics(trainer, pl_module))

    logger = L.CSVLogger(str(tmp_path), version="run_abcdefgh")
    _bar_trainer(tmp_path, Watching(), logger=logger, log_every_n_steps=1).fit(
        BarModel(), make_loader(), make_loader(n=16)
    )
    assert list(shown[0]) == ["v_num", "shown", "three", "val_loss"] and shown[0]["v_num"] == "efgh"


# ---- the Trainer's checks ----------------------------------------------------------------------------


def test_the_trainer_refuses_a_bar_it_was_told_to_disable(tmp_path: Any) -> None:
    message = "Trainer was configured with `enable_progress_bar=False` but found `TQDMProgressBar` in callbacks list."
    with pytest.raises(MisconfigurationException, match=message):
        L.Trainer(enable_progress_bar=False, callbacks=[TQDMProgressBar()], default_root_dir=str(tmp_path))
    with pytest.raises(MisconfigurationException, match="enable_progress_bar=False"):
        L.Trainer(barebones=True, callbacks=[TQDMProgressBar()], default_root_dir=str(tmp_path))


def test_the_trainer_refuses_two_bars(tmp_path: Any) -> None:
    message = (
        "You added multiple progress bar callbacks to the Trainer, but currently only one progress bar is supported."
    )
    with pytest.raises(MisconfigurationException, match=message):
        L.Trainer(callbacks=[TQDMProgressBar(), TQDMProgressBar()], default_root_dir=str(tmp_path))


def test_progress_bar_callback(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as without_rich:  # with rich installed, the default bar is rich's
        without_rich.setitem(sys.modules, "rich", None)
        assert type(L.Trainer(default_root_dir=str(tmp_path)).progress_bar_callback) is TQDMProgressBar
    assert L.Trainer(enable_progress_bar=False, default_root_dir=str(tmp_path)).progress_bar_callback is None
    given = TQDMProgressBar()
    assert L.Trainer(callbacks=[given], default_root_dir=str(tmp_path)).progress_bar_callback is given
