"""A table of the model's layers and parameter counts, printed when fit starts."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from stages.callbacks.callback import Callback

_UNITS = ("", " K", " M", " B", " T")


class ModelSummary(Callback):
    """Prints `summarize(pl_module, max_depth)` on global rank zero as fit starts (max_depth=0: nothing)."""

    def __init__(self, max_depth: int = 1) -> None:
        _check_max_depth(max_depth)
        self._max_depth = max_depth

    @property
    def max_depth(self) -> int:
        return self._max_depth

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self._max_depth == 0 or not trainer.is_global_zero:
            return
        print(summarize(pl_module, self._max_depth))


def summarize(module: nn.Module, max_depth: int = 1) -> str:
    """The module's submodules down to `max_depth` levels (-1: all, 0: none) with their parameter counts and
    train/eval mode, followed by totals for the whole module."""
    _check_max_depth(max_depth)
    rows = [
        [str(index), name, type(child).__name__, human_count(_count(child.parameters())), _mode(child)]
        for index, (name, child) in enumerate(
            (name, child)
            for name, child in module.named_modules()
            if name and (max_depth == -1 or name.count(".") < max_depth)
        )
    ]
    lines = _table(["", "Name", "Type", "Params", "Mode"], rows) if rows else []

    params = list(module.parameters())
    trainable = _count(p for p in params if p.requires_grad)
    total = _count(params)
    size_mb = sum(p.numel() * p.element_size() for p in params if not _is_uninitialized(p)) / 1e6
    modes = [m.training for m in module.modules()]
    totals = [
        (human_count(trainable), "Trainable params"),
        (human_count(total - trainable), "Non-trainable params"),
        (human_count(total), "Total params"),
        (f"{size_mb:,.3f}", "Total estimated model params size (MB)"),
        (str(sum(modes)), "Modules in train mode"),
        (str(len(modes) - sum(modes)), "Modules in eval mode"),
    ]
    lines += [f"{value:<10}{label}" for value, label in totals]
    return "\n".join(lines)


def human_count(number: int) -> str:
    """1234 -> "1.2 K", 123456 -> "123 K", 12 -> "12"."""
    scaled = float(number)
    unit = 0
    while abs(scaled) >= 1000 and unit < len(_UNITS) - 1:
        scaled /= 1000
        unit += 1
    if unit == 0:
        return str(number)
    return f"{scaled:.1f}{_UNITS[unit]}" if abs(scaled) < 100 else f"{scaled:.0f}{_UNITS[unit]}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[col]) for row in [header, *rows]) for col in range(len(header))]

    def render(cells: list[str]) -> str:
        return " | ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

    rule = "-" * len(" | ".join(" " * width for width in widths))
    return [render(header), rule, *(render(row) for row in rows), rule]


def _count(params: Any) -> int:
    # lazy modules hold parameters without a shape until their first forward; they count as zero
    return sum(p.numel() for p in params if not _is_uninitialized(p))


def _is_uninitialized(param: torch.Tensor) -> bool:
    return isinstance(param, nn.parameter.UninitializedParameter)


def _mode(module: nn.Module) -> str:
    return "train" if module.training else "eval"


def _check_max_depth(max_depth: Any) -> None:
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
        raise ValueError(f"max_depth {max_depth!r} must be an int >= -1 (-1: all levels, 0: no summary)")
