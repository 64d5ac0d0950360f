"""RichModelSummary: the model summary as a `rich` table (an optional extra)."""

from __future__ import annotations

from typing import Any

from torch import nn

from stages.callbacks.model_summary import ModelSummary, Summary
from stages.callbacks.rich_support import require_rich

_STYLE_KEYS = ("header_style",)
# As Lightning's rich summary lays it out: counts and sizes right-aligned, "label: value" lines under the table.
_LEFT_COLUMNS = frozenset({"", "Name", "Type", "Mode"})
_RICH_LABELS = {"Total Flops": "Total FLOPs"}


class RichModelSummary(ModelSummary):
    """Prints the layers down to `max_depth` with their types, parameter counts and train/eval mode as a rich
    table when fit starts, then the totals. `header_style` (a rich style, "bold magenta" by default) styles
    the header. Needs the `rich` extra."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        require_rich("RichModelSummary")
        super().__init__(max_depth)
        unknown = sorted(set(summarize_kwargs) - set(_STYLE_KEYS))
        if unknown:
            raise TypeError(f"RichModelSummary got unknown arguments {unknown}; allowed: {list(_STYLE_KEYS)}")
        self._summarize_kwargs = summarize_kwargs

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.max_depth == 0 or not trainer.is_global_zero:
            return
        from rich.console import Console

        console = Console()
        for renderable in summary_renderables(pl_module, self.max_depth, **self._summarize_kwargs):
            console.print(renderable)


def summary_renderables(module: nn.Module, max_depth: int, header_style: str = "bold magenta") -> list[Any]:
    """The layer table and the totals lines of `module`, ready for `rich.console.Console.print`."""
    from rich.table import Table
    from rich.text import Text

    summary = Summary(module, max_depth)
    header, rows = summary.layer_table()
    table = Table(header_style=header_style)
    for title in header:
        table.add_column(title, justify="left" if title in _LEFT_COLUMNS else "right")
    for row in rows:
        table.add_row(*row)
    # One text of bold "label: " and value lines: what a one-column grid shows, without its layout pass.
    lines = [((f"{_RICH_LABELS.get(label, label)}", "bold"), f": {value}") for value, label in summary.totals()]
    totals = Text("\n").join(Text.assemble(*line) for line in lines)
    return [table, totals] if rows else [totals]
