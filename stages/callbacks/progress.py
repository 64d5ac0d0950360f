"""Progress bars: the ProgressBar contract and a tqdm implementation that stays silent off a terminal."""

from __future__ import annotations

import math
import sys
import warnings
from typing import Any

import torch
from tqdm import tqdm

from stages.callbacks.callback import Callback
from stages.exceptions import TrainerWarning


class ProgressBar(Callback):
    """Base of progress bar callbacks; the trainer finds its bar by this type."""

    def __init__(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def enable(self) -> None:
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # every process would draw over the others' bars: only global rank 0 shows one
        if not trainer.is_global_zero:
            self.disable()

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        """What the bar shows: `v_num` (the first logger's version) and the metrics logged with prog_bar."""
        standard: dict[str, Any] = {}
        logger = trainer.logger
        if logger is not None and logger.version is not None:
            version = logger.version
            # a long str version (a timestamp, a hash) would crowd the bar; its tail tells runs apart
            standard["v_num"] = version[-4:] if isinstance(version, str) else version
        logged = trainer.progress_bar_metrics
        duplicates = standard.keys() & logged.keys()
        if duplicates:
            warnings.warn(
                f"The progress bar already shows {sorted(duplicates)}; the logged values replace them",
                TrainerWarning,
                stacklevel=2,
            )
        return {**standard, **logged}


class TQDMProgressBar(ProgressBar):
    """One bar per training epoch (`Epoch N`) and one for each sanity check, validation, test and predict run.

    Bars are redrawn every `refresh_rate` batches (0 disables the bar). Nothing is drawn when stdout is not
    a terminal, so the default bar costs nothing in CI or under pytest. `process_position` stacks the bars
    of several trainers in one terminal; `leave` keeps each finished epoch's bar on screen.
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__()
        if not _is_non_negative_int(refresh_rate):
            raise ValueError(f"refresh_rate {refresh_rate!r} must be an int >= 0 (0 disables the bar)")
        if not _is_non_negative_int(process_position):
            raise ValueError(f"process_position {process_position!r} must be an int >= 0")
        if not isinstance(leave, bool):
            raise ValueError(f"leave {leave!r} must be a bool")
        self._refresh_rate = refresh_rate
        self._process_position = process_position
        self._leave = leave
        self._train_bar: tqdm | None = None
        self._eval_bar: tqdm | None = None
        self._eval_description = ""
        self._eval_totals: list[int | float] = []
        self._eval_dataloader_idx = -1

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def process_position(self) -> int:
        return self._process_position

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self._refresh_rate > 0 and self._should_render()

    def disable(self) -> None:
        super().disable()
        self._close_train_bar()
        self._close_eval_bar()

    def _should_render(self) -> bool:
        """Bars only make sense on a terminal; in a log file or a captured stream they are noise."""
        isatty = getattr(sys.stdout, "isatty", None)
        return callable(isatty) and bool(isatty())

    def _new_bar(self, description: str, position: int, leave: bool, total: int | None) -> tqdm:
        return tqdm(
            desc=description,
            total=total,
            position=position,
            leave=leave,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
        )

    def _is_refresh_due(self, bar: tqdm, done: int) -> bool:
        # the last batch always redraws, so a finished bar never shows a stale count
        return done % self._refresh_rate == 0 or (bar.total is not None and done >= bar.total)

    def _advance_eval_bar(self, batch_idx: int) -> None:
        bar = self._eval_bar
        if bar is not None and self._is_refresh_due(bar, batch_idx + 1):
            bar.n = batch_idx + 1
            bar.refresh()

    # training

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        total = _total(trainer.num_training_batches)
        description = f"Epoch {trainer.current_epoch}"
        if self._train_bar is not None and not self._leave:
            self._train_bar.reset(total=total)
            self._train_bar.set_description(description)
            return
        self._close_train_bar()
        if self.is_enabled:
            self._train_bar = self._new_bar(description, 2 * self._process_position, self._leave, total)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self._train_bar
        if bar is None:
            return
        done = batch_idx + 1
        if self._is_refresh_due(bar, done):
            # n is set, not incremented, so a run resumed mid-epoch shows its true position
            bar.n = done
            bar.set_postfix(_format_metrics(self.get_metrics(trainer, pl_module)), refresh=False)
            bar.refresh()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._train_bar is not None:
            self._train_bar.set_postfix(_format_metrics(self.get_metrics(trainer, pl_module)))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_train_bar()

    def _close_train_bar(self) -> None:
        if self._train_bar is not None:
            self._train_bar.close()
            self._train_bar = None

    # evaluation: sanity check, validation, test and predict share one bar slot

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            self._open_eval_bar("Sanity Checking", trainer.num_sanity_val_batches, leave=False)
        else:
            # a standalone validate run has no epoch bar to carry the result, so its own bar stays
            leave = trainer.state.fn == "validate"
            self._open_eval_bar("Validation", trainer.num_val_batches, leave=leave)

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._enter_dataloader(dataloader_idx)

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_eval_bar(batch_idx)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_eval_bar()
        # validation may have logged new prog_bar metrics; show them on the epoch's bar now
        if self._train_bar is not None:
            self._train_bar.set_postfix(_format_metrics(self.get_metrics(trainer, pl_module)))

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._open_eval_bar("Testing", trainer.num_test_batches, leave=True)

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._enter_dataloader(dataloader_idx)

    def on_test_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_eval_bar(batch_idx)

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_eval_bar()

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self._open_eval_bar("Predicting", trainer.num_predict_batches, leave=True)

    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._enter_dataloader(dataloader_idx)

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_eval_bar(batch_idx)

    def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_eval_bar()

    def _open_eval_bar(self, description: str, totals: list[int | float], leave: bool) -> None:
        self._close_eval_bar()
        if not self.is_enabled:
            return
        # under fit the epoch's bar holds the first line of this process's pair
        position = 2 * self._process_position + (1 if self._train_bar is not None else 0)
        self._eval_description = description
        self._eval_totals = list(totals)
        self._eval_dataloader_idx = 0
        self._eval_bar = self._new_bar(self._eval_bar_description(0), position, leave, self._eval_total(0))

    def _enter_dataloader(self, dataloader_idx: int) -> None:
        bar = self._eval_bar
        if bar is None or dataloader_idx == self._eval_dataloader_idx:
            return
        self._eval_dataloader_idx = dataloader_idx
        bar.reset(total=self._eval_total(dataloader_idx))
        bar.set_description(self._eval_bar_description(dataloader_idx))

    def _eval_total(self, dataloader_idx: int) -> int | None:
        if dataloader_idx >= len(self._eval_totals):
            return None
        return _total(self._eval_totals[dataloader_idx])

    def _eval_bar_description(self, dataloader_idx: int) -> str:
        if len(self._eval_totals) > 1:
            return f"{self._eval_description} DataLoader {dataloader_idx}"
        return self._eval_description

    def _close_eval_bar(self) -> None:
        if self._eval_bar is not None:
            self._eval_bar.close()
            self._eval_bar = None


def _is_non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _total(batches: int | float) -> int | None:
    """tqdm's total: None (a counter without a bar) for loaders of unknown length."""
    return None if math.isinf(batches) else int(batches)


def _format_metrics(metrics: dict[str, Any]) -> dict[str, str]:
    formatted: dict[str, str] = {}
    for key, value in metrics.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        formatted[key] = f"{value:.3g}" if isinstance(value, float) else str(value)
    return formatted
