"""The ModelSummary table and callback (the progress bars are tested in test_tqdm_progress_bar.py)."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

import statemachine as L
from stages.callbacks.model_summary import ModelSummary, human_count, summarize
from statemachine.utilities import model_summary


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
    assert table.splitlines()[0].split("|")[1:] == [" Name    ", " Type       ", " Params ", " Mode  ", " FLOPs"]
    assert _rows(table) == [
        ["0", "encoder", "Sequential", "40", "eval", "0"],  # no example input: nothing ran, nothing counted
        ["1", "head", "Linear", "18", "train", "0"],
    ]
    assert _totals(table) == {
        "Trainable params": "56",
        "Non-trainable params": "2",
        "Total params": "58",
        "Total estimated model params size (MB)": "0.000",
        "Modules in train mode": "1",  # the model itself is not counted, as in Lightning
        "Modules in eval mode": "3",
        "Total Flops": "0",
    }


class _Example(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Sequential(nn.Linear(4, 4), nn.Dropout())
        self.example_input_array = torch.zeros(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_summary_counts_the_operations_of_the_example_forward_as_lightning() -> None:
    summary = model_summary.summarize(_Example(), max_depth=1)
    # a 2x3 @ 3x4 product is 2*2*3*4 = 48 operations; the 2x4 @ 4x4 one in `b` is 64 (Lightning 2.6.6 shows the same)
    assert {name: sum(counts.values()) for name, counts in summary.flop_counts.items()} == {"a": 48, "b": 64}
    assert summary.total_flops == 112
    assert summary.total_training_modes == {"train": 4, "eval": 0}
    assert summary.total_layer_params == 36 and [name for name, _ in summary.named_modules] == ["a", "b"]
    table = str(summary)
    assert [row[5:] for row in _rows(table)] == [["48", "[2, 3]", "[2, 4]"], ["64", "[2, 4]", "[2, 4]"]]
    assert _totals(table)["Total Flops"] == "112"


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


def test_model_summary_callback_logs_on_global_zero_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="stages.callbacks.model_summary"):
        ModelSummary().on_fit_start(_trainer(), _Net())
        [record] = caplog.records
        assert record.levelno == logging.INFO and "encoder" in record.getMessage()
        ModelSummary().on_fit_start(_trainer(is_global_zero=False), _Net())
        ModelSummary(max_depth=0).on_fit_start(_trainer(), _Net())
    assert len(caplog.records) == 1


@pytest.mark.parametrize("depth", [-2, 1.0, True])
def test_model_summary_refuses_bad_depth(depth: Any) -> None:
    with pytest.raises(ValueError, match=f"max_depth {depth!r} must be an int >= -1"):
        ModelSummary(max_depth=depth)
    with pytest.raises(ValueError, match="max_depth"):
        summarize(_Net(), depth)
