"""TQDMProgressBar driven through its hooks with a fake trainer, and the ModelSummary table."""

from __future__ import annotations

import io
import re
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from stages.callbacks.model_summary import ModelSummary, human_count, summarize
from stages.callbacks.progress import ProgressBar, TQDMProgressBar
from stages.callbacks.rich_progress import RichProgressBar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _use_terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    # called from the test body: pytest's output capture re-installs sys.stdout after fixtures have run
    screen = _Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    return screen


def _trainer(**overrides: Any) -> SimpleNamespace:
    trainer = SimpleNamespace(
        current_epoch=0,
        global_step=0,
        num_training_batches=5,
        num_val_batches=[2],
        num_sanity_val_batches=[2],
        num_test_batches=[3],
        num_predict_batches=[3],
        progress_bar_metrics={"loss": 0.123456},
        logger=SimpleNamespace(version=3),
        is_global_zero=True,
        sanity_checking=False,
        state=SimpleNamespace(fn="fit"),
    )
    for key, value in overrides.items():
        setattr(trainer, key, value)
    return trainer


def _run_train_epoch(bar: TQDMProgressBar, trainer: SimpleNamespace, batches: int) -> None:
    bar.on_train_epoch_start(trainer, None)
    for batch_idx in range(batches):
        bar.on_train_batch_end(trainer, None, None, None, batch_idx)
    bar.on_train_epoch_end(trainer, None)


def _run_eval(bar: TQDMProgressBar, trainer: SimpleNamespace, kind: str, batches: list[int]) -> None:
    getattr(bar, f"on_{kind}_start")(trainer, None)
    for dataloader_idx, count in enumerate(batches):
        for batch_idx in range(count):
            getattr(bar, f"on_{kind}_batch_start")(trainer, None, None, batch_idx, dataloader_idx)
            getattr(bar, f"on_{kind}_batch_end")(trainer, None, None, None, batch_idx, dataloader_idx)
    getattr(bar, f"on_{kind}_end")(trainer, None)


# --- ProgressBar.get_metrics ---


def test_get_metrics_adds_logger_version_as_v_num() -> None:
    bar = ProgressBar()
    assert bar.get_metrics(_trainer(), None) == {"v_num": 3, "loss": 0.123456}
    long_version = _trainer(logger=SimpleNamespace(version="2024_05_01-abcd"))
    assert bar.get_metrics(long_version, None)["v_num"] == "abcd"
    assert bar.get_metrics(_trainer(logger=None), None) == {"loss": 0.123456}


def test_get_metrics_warns_when_a_logged_metric_hides_v_num() -> None:
    trainer = _trainer(progress_bar_metrics={"v_num": 9.0})
    with pytest.warns(UserWarning, match="already shows \\['v_num'\\]"):
        assert ProgressBar().get_metrics(trainer, None) == {"v_num": 9.0}


def test_enable_and_disable() -> None:
    bar = ProgressBar()
    bar.disable()
    assert bar.is_disabled and not bar.is_enabled
    bar.enable()
    assert bar.is_enabled


# --- TQDMProgressBar ---


def test_tqdm_bar_is_silent_when_stdout_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    captured = io.StringIO()  # isatty() is False, like CI logs and pytest's capture
    monkeypatch.setattr(sys, "stdout", captured)
    monkeypatch.setattr(sys, "stderr", captured)
    bar = TQDMProgressBar()
    assert not bar._should_render()
    assert not bar.is_enabled
    trainer = _trainer()
    _run_eval(bar, _trainer(sanity_checking=True), "validation", [2])
    _run_train_epoch(bar, trainer, 5)
    _run_eval(bar, trainer, "validation", [2])
    bar.on_train_end(trainer, None)
    _run_eval(bar, trainer, "test", [3])
    _run_eval(bar, trainer, "predict", [3])
    assert captured.getvalue() == ""


def test_tqdm_bar_renders_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _use_terminal(monkeypatch)
    bar = TQDMProgressBar()
    assert bar._should_render() and bar.is_enabled
    trainer = _trainer()
    _run_eval(bar, _trainer(sanity_checking=True), "validation", [2])
    for epoch in range(2):
        trainer.current_epoch = epoch
        _run_train_epoch(bar, trainer, 5)
        trainer.progress_bar_metrics = {"loss": 0.123456, "val_acc": 0.5 + epoch}
        _run_eval(bar, trainer, "validation", [2])
        train_bar = bar._train_bar
        assert train_bar is not None
        assert f"val_acc={0.5 + epoch}" in train_bar.postfix  # validation's result lands on the epoch's bar
    bar.on_train_end(trainer, None)
    out = terminal.getvalue()
    assert "Sanity Checking" in out
    assert "Epoch 0" in out and "Epoch 1" in out
    assert "5/5" in out
    assert "loss=0.123" in out and "v_num=3" in out
    assert "Validation" in out
    assert bar._train_bar is None and bar._eval_bar is None


def test_tqdm_bar_names_dataloaders_and_covers_test_and_predict(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _use_terminal(monkeypatch)
    bar = TQDMProgressBar()
    trainer = _trainer(num_test_batches=[2, 1], state=SimpleNamespace(fn="test"))
    _run_eval(bar, trainer, "test", [2, 1])
    _run_eval(bar, trainer, "predict", [3])
    out = terminal.getvalue()
    assert "Testing DataLoader 0" in out and "Testing DataLoader 1" in out
    assert "Predicting" in out and "3/3" in out


def test_refresh_rate_limits_redraws_but_the_last_batch_always_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    bar = TQDMProgressBar(refresh_rate=2)
    trainer = _trainer()
    bar.on_train_epoch_start(trainer, None)
    train_bar = bar._train_bar
    assert train_bar is not None and train_bar.total == 5
    seen = []
    for batch_idx in range(5):
        bar.on_train_batch_end(trainer, None, None, None, batch_idx)
        seen.append(train_bar.n)
    assert seen == [0, 2, 2, 4, 5]


def test_unsized_loader_gives_a_counter_without_total(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    bar = TQDMProgressBar()
    trainer = _trainer(num_training_batches=float("inf"))
    bar.on_train_epoch_start(trainer, None)
    bar.on_train_batch_end(trainer, None, None, None, 6)
    assert bar._train_bar is not None
    assert bar._train_bar.total is None and bar._train_bar.n == 7


def test_leave_keeps_one_bar_per_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    bar = TQDMProgressBar(leave=True)
    trainer = _trainer()
    _run_train_epoch(bar, trainer, 5)
    first = bar._train_bar
    trainer.current_epoch = 1
    _run_train_epoch(bar, trainer, 5)
    assert bar._train_bar is not first and first is not None and first.disable  # closed, left on screen


def test_refresh_rate_zero_and_non_zero_ranks_draw_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _use_terminal(monkeypatch)
    silent = TQDMProgressBar(refresh_rate=0)
    assert not silent.is_enabled
    _run_train_epoch(silent, _trainer(), 5)

    other_rank = TQDMProgressBar()
    other_rank.setup(_trainer(is_global_zero=False), None, "fit")
    assert not other_rank.is_enabled
    rich_other_rank = RichProgressBar()
    rich_other_rank.setup(_trainer(is_global_zero=False), None, "fit")
    assert not rich_other_rank.is_enabled
    _run_train_epoch(other_rank, _trainer(), 5)
    assert terminal.getvalue() == ""


def test_disable_closes_open_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    _use_terminal(monkeypatch)
    bar = TQDMProgressBar()
    trainer = _trainer()
    bar.on_train_epoch_start(trainer, None)
    bar.disable()
    assert bar._train_bar is None
    bar.on_train_batch_end(trainer, None, None, None, 0)  # no bar, no error


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"refresh_rate": -1}, "refresh_rate -1 must be an int >= 0"),
        ({"refresh_rate": 1.5}, "refresh_rate 1.5 must be an int >= 0"),
        ({"process_position": -2}, "process_position -2 must be an int >= 0"),
        ({"leave": 1}, "leave 1 must be a bool"),
    ],
)
def test_tqdm_bar_refuses_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TQDMProgressBar(**kwargs)


# --- ModelSummary ---


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)
        self.head.bias.requires_grad_(False)
        self.encoder.eval()


def _rows(table: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("|")] for line in table.splitlines() if re.match(r"\d+ +\|", line)]


def _totals(table: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in re.finditer(r"^(\S+(?: [KMBT])?) +([A-Z].*)$", table, re.MULTILINE)}


def test_summary_lists_children_with_params_and_mode() -> None:
    table = summarize(_Net(), max_depth=1)
    assert table.splitlines()[0].split("|")[1:] == [" Name    ", " Type       ", " Params ", " Mode"]
    assert _rows(table) == [
        ["0", "encoder", "Sequential", "40", "eval"],
        ["1", "head", "Linear", "18", "train"],
    ]
    assert _totals(table) == {
        "Trainable params": "56",
        "Non-trainable params": "2",
        "Total params": "58",
        "Total estimated model params size (MB)": "0.000",
        "Modules in train mode": "2",
        "Modules in eval mode": "3",
    }


def test_summary_depth_all_levels_and_none() -> None:
    assert [row[1] for row in _rows(summarize(_Net(), max_depth=-1))] == [
        "encoder",
        "encoder.0",
        "encoder.1",
        "head",
    ]
    no_rows = summarize(_Net(), max_depth=0)
    assert _rows(no_rows) == [] and "Total params" in no_rows


def test_summary_counts_shared_and_lazy_parameters_sensibly() -> None:
    shared = nn.Linear(1000, 1000)
    model = nn.Sequential(shared, shared, nn.LazyLinear(3))
    totals = _totals(summarize(model, max_depth=1))
    assert totals["Total params"] == "1.0 M"  # the shared layer once; the lazy one has no size yet
    assert totals["Total estimated model params size (MB)"] == "4.004"
    double = nn.Linear(10, 10).to(torch.float64)
    assert _totals(summarize(double))["Total estimated model params size (MB)"] == "0.001"


def test_human_count() -> None:
    assert [human_count(n) for n in (0, 999, 1234, 123_456, 12_345_678, 3 * 10**9)] == [
        "0",
        "999",
        "1.2 K",
        "123 K",
        "12.3 M",
        "3.0 B",
    ]


def test_model_summary_callback_prints_on_global_zero_only(capsys: pytest.CaptureFixture[str]) -> None:
    ModelSummary().on_fit_start(_trainer(), _Net())
    assert "encoder" in capsys.readouterr().out
    ModelSummary().on_fit_start(_trainer(is_global_zero=False), _Net())
    ModelSummary(max_depth=0).on_fit_start(_trainer(), _Net())
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("depth", [-2, 1.0, True])
def test_model_summary_refuses_bad_depth(depth: Any) -> None:
    with pytest.raises(ValueError, match=f"max_depth {depth!r} must be an int >= -1"):
        ModelSummary(max_depth=depth)
    with pytest.raises(ValueError, match="max_depth"):
        summarize(_Net(), depth)
