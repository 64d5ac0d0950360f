"""The ModelSummary table and callback (the progress bars are tested in test_tqdm_progress_bar.py)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from stages.callbacks.model_summary import ModelSummary, human_count, summarize


def _trainer(**overrides: Any) -> SimpleNamespace:
    return SimpleNamespace(**{"is_global_zero": True, **overrides})


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
