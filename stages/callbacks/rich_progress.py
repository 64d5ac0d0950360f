"""RichProgressBar: progress bars drawn with `rich` (an optional extra)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from stages.callbacks.progress import ProgressBar
from stages.callbacks.rich_support import require_rich


@dataclass
class RichProgressBarTheme:
    """Styles of the bar's parts, as rich style strings."""

    description: str = ""
    progress_bar: str = "#6206E0"
    progress_bar_finished: str = "#6206E0"
    progress_bar_pulse: str = "#6206E0"
    batch_progress: str = ""
    time: str = "dim"
    processing_speed: str = "dim underline"
    metrics: str = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


class RichProgressBar(ProgressBar):
    """One bar per training epoch (`Epoch N/last`, replaced each epoch unless `leave`), and bars for the sanity check,
    validation, test and predict runs, with batches done, elapsed time, speed and the metrics logged with
    `prog_bar=True`. Redrawn every `refresh_rate` batches (0 disables it). `console_kwargs` go to
    `rich.console.Console`. Needs the `rich` extra."""

    def __init__(
        self,
        refresh_rate: int = 1,
        leave: bool = False,
        theme: RichProgressBarTheme | None = None,
        console_kwargs: dict[str, Any] | None = None,
    ) -> None:
        require_rich("RichProgressBar")
        super().__init__()
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(f"refresh_rate {refresh_rate!r} must be an int >= 0 (0 disables the bar)")
        self._refresh_rate = refresh_rate
        self._leave = leave
        self.theme = theme or RichProgressBarTheme()
        self._console_kwargs = console_kwargs or {}
        self._progress: Any = None
        self._train_task: Any = None
        self._eval_task: Any = None
        self._eval_done = 0

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self._refresh_rate > 0

    def disable(self) -> None:
        super().disable()
        self._stop()

    # ---- drawing ----------------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._progress is not None or not self.is_enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        theme = self.theme
        self._progress = Progress(
            TextColumn("[progress.description]{task.description}", style=theme.description),
            BarColumn(
                complete_style=theme.progress_bar,
                finished_style=theme.progress_bar_finished,
                pulse_style=theme.progress_bar_pulse,
            ),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("•", style=theme.time),  # elapsed • remaining, as Lightning's bar shows them
            TimeRemainingColumn(),
            TextColumn("{task.fields[speed]}", style=theme.processing_speed),
            TextColumn("{task.fields[metrics]}", style=theme.metrics),
            console=Console(**self._console_kwargs),
            auto_refresh=False,
        )
        self._progress.start()

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.refresh()
            self._progress.stop()
        self._progress = self._train_task = self._eval_task = None

    def _add_task(self, description: str, total: int | float) -> Any:
        self._start()
        if self._progress is None:
            return None
        known = None if math.isinf(total) else int(total)
        return self._progress.add_task(description, total=known, speed="", metrics="")

    def _advance(self, task: Any, done: int, trainer: Any = None, pl_module: Any = None) -> None:
        """Move `task` to `done` batches; with `trainer`, also show the current metrics."""
        progress = self._progress
        if progress is None or task is None:
            return
        state = next(t for t in progress.tasks if t.id == task)
        if done % self._refresh_rate and done != state.total:
            return
        elapsed = state.elapsed or 0.0
        fields: dict[str, Any] = {"speed": f"{done / elapsed:.2f}it/s" if elapsed > 0 else ""}
        if trainer is not None:
            fields["metrics"] = self._format(self.get_metrics(trainer, pl_module))
        progress.update(task, completed=done, **fields)
        progress.refresh()

    def _format(self, metrics: dict[str, Any]) -> str:
        parts = []
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            shown = format(value, self.theme.metrics_format) if isinstance(value, float) else str(value)
            parts.append(f"{name}: {shown}")
        return self.theme.metrics_text_delimiter.join(parts)

    # ---- training ---------------------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        description = f"Epoch {trainer.current_epoch}"
        if trainer.max_epochs is not None and trainer.max_epochs > 0:  # "Epoch 1/9" for 10 epochs, as Lightning
            description += f"/{trainer.max_epochs - 1}"
        total = trainer.num_training_batches
        if self._train_task is not None and not self._leave and self._progress is not None:
            known = None if math.isinf(total) else int(total)
            shown = next(t for t in self._progress.tasks if t.id == self._train_task).fields["metrics"]
            # the last epoch's metrics stay on show until this epoch logs its own
            self._progress.reset(self._train_task, total=known, description=description, speed="", metrics=shown)
            return
        self._train_task = self._add_task(description, total)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._advance(self._train_task, batch_idx + 1, trainer, pl_module)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._progress is not None and self._train_task is not None:
            self._progress.update(self._train_task, metrics=self._format(self.get_metrics(trainer, pl_module)))
            self._progress.refresh()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._stop()

    # ---- evaluation and prediction ----------------------------------------------------------------------

    def _open_eval(self, description: str, totals: list[int | float]) -> None:
        self._eval_task = self._add_task(description, sum(totals))
        self._eval_done = 0

    def _eval_batch_end(self) -> None:
        self._eval_done += 1
        self._advance(self._eval_task, self._eval_done)

    def _remove_eval(self) -> None:
        """Inside fit, the epoch bar stays and a finished sanity check or validation bar goes."""
        if self._progress is not None and self._eval_task is not None:
            self._progress.remove_task(self._eval_task)
            self._progress.refresh()
        self._eval_task = None

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            self._open_eval("Sanity Checking", trainer.num_sanity_val_batches)
        else:
            self._open_eval("Validation", trainer.num_val_batches)

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.state.fn != "fit":
            self._stop()
            return
        self._remove_eval()
        if self._train_task is not None and self._progress is not None:
            self._progress.update(self._train_task, metrics=self._format(self.get_metrics(trainer, pl_module)))
            self._progress.refresh()

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._open_eval("Testing", trainer.num_test_batches)

    def on_test_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end()

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self._stop()

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self._open_eval("Predicting", trainer.num_predict_batches)

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end()

    def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
        self._stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._stop()  # give the terminal back before the traceback is printed

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._stop()
