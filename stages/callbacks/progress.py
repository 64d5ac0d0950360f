"""Progress bars: the ProgressBar contract and the tqdm bar, which stays silent off a terminal."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from typing import Any

from stages.callbacks.callback import Callback
from stages.exceptions import TrainerWarning
from stages.rank_zero import rank_zero_debug, rank_zero_warn

# tqdm.auto draws a widget in a notebook, but only works there when ipywidgets is installed
if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm as _tqdm
else:
    from tqdm import tqdm as _tqdm

_PAD_SIZE = 5
_COLAB_REFRESH_RATE = 20


class ProgressBar(Callback):
    """Base of progress bar callbacks; the trainer finds its bar by this type.

    It knows the trainer from `setup` on, and offers what a bar needs: the batch totals of the current run and
    dataloader, the descriptions, `get_metrics` and a `print` that does not break the bar.
    """

    def __init__(self) -> None:
        self._trainer: Any = None
        self._current_eval_dataloader_idx: int | None = None
        self._enabled = True

    @property
    def trainer(self) -> Any:
        if self._trainer is None:
            raise TypeError(f"The `{self.__class__.__name__}._trainer` reference has not been set yet.")
        return self._trainer

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

    @property
    def sanity_check_description(self) -> str:
        return "Sanity Checking"

    @property
    def train_description(self) -> str:
        return "Training"

    @property
    def validation_description(self) -> str:
        return "Validation"

    @property
    def test_description(self) -> str:
        return "Testing"

    @property
    def predict_description(self) -> str:
        return "Predicting"

    @property
    def total_train_batches(self) -> int | float:
        """Training batches this epoch (`inf` for a loader without a length); capped by the steps left when
        only `max_steps` ends the fit."""
        trainer = self.trainer
        if trainer.max_epochs == -1 and trainer.max_steps is not None and trainer.max_steps > 0:
            return min(trainer.num_training_batches, trainer.max_steps - trainer.global_step)
        return trainer.num_training_batches

    @property
    def total_val_batches_current_dataloader(self) -> int | float:
        """Batches of the validation (or sanity check) dataloader now running; `inf` without a length."""
        trainer = self.trainer
        batches = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        return batches[self._running_dataloader_idx("total_val_batches_current_dataloader")]

    @property
    def total_test_batches_current_dataloader(self) -> int | float:
        """Batches of the test dataloader now running; `inf` without a length."""
        return self.trainer.num_test_batches[self._running_dataloader_idx("total_test_batches_current_dataloader")]

    @property
    def total_predict_batches_current_dataloader(self) -> int | float:
        """Batches of the predict dataloader now running; `inf` without a length."""
        index = self._running_dataloader_idx("total_predict_batches_current_dataloader")
        return self.trainer.num_predict_batches[index]

    @property
    def total_val_batches(self) -> int | float:
        """Validation batches over all val dataloaders this epoch: 0 when the epoch does not validate."""
        trainer = self.trainer
        if not trainer.fit_loop.epoch_validates_at(trainer.current_epoch):
            return 0
        return sum(trainer.num_val_batches)

    def _running_dataloader_idx(self, name: str) -> int:
        index = self._current_eval_dataloader_idx
        if index is None:
            raise AssertionError(f"{name} is known once a batch of the dataloader has started")
        return index

    def has_dataloader_changed(self, dataloader_idx: int) -> bool:
        """Remember `dataloader_idx` as the running one; True when it differs from the one before."""
        previous = self._current_eval_dataloader_idx
        self._current_eval_dataloader_idx = dataloader_idx
        return previous != dataloader_idx

    def reset_dataloader_idx_tracker(self) -> None:
        self._current_eval_dataloader_idx = None

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print without breaking the bar; a subclass that draws routes this through its drawing."""
        print(*args, **kwargs)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._trainer = trainer
        # every process would draw over the others' bars: only global rank 0 shows one
        if not trainer.is_global_zero:
            self.disable()

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        """What the bar shows: `v_num` (the loggers' version) and the metrics logged with prog_bar."""
        standard = get_standard_metrics(trainer)
        logged = trainer.progress_bar_metrics
        duplicates = [name for name in standard if name in logged]
        if duplicates:
            rank_zero_warn(
                f"The progress bar already tracks a metric with the name(s) '{', '.join(duplicates)}' and"
                f" `self.log('{duplicates[0]}', ..., prog_bar=True)` will overwrite this value. "
                " If this is undesired, change the name or override `get_metrics()` in the progress bar callback.",
                category=TrainerWarning,
            )
        return {**standard, **logged}


def get_standard_metrics(trainer: Any) -> dict[str, int | str]:
    """`v_num`: the version of the run's logger (the loggers' distinct versions joined by `_`).

    A str version shows its last 4 characters, enough to tell runs apart without crowding the bar; an empty or
    missing version is left out.
    """
    loggers = trainer.loggers
    if not loggers:
        return {}
    version = loggers[0].version if len(loggers) == 1 else "_".join(dict.fromkeys(str(lg.version) for lg in loggers))
    if version in ("", None):
        return {}
    return {"v_num": version[-4:] if isinstance(version, str) else version}


class Tqdm(_tqdm):
    """tqdm whose float and text postfix values are padded with zeros to a steady width, so the bar does not
    jump about as the values change."""

    @staticmethod
    def format_num(n: int | float | str) -> str:
        text = n if isinstance(n, str) else _tqdm.format_num(n)
        if not isinstance(n, float | str) or "e" in text:
            return str(text)
        if "." not in text and len(text) < _PAD_SIZE:
            if not _is_number(text):
                return text
            text += "."
        return str(text).ljust(_PAD_SIZE, "0")


class TQDMProgressBar(ProgressBar):
    """The default bar: one per training epoch (`Epoch N`) and one for each sanity check, validation, test and
    predict run, named per dataloader (`Validation DataLoader 0`).

    Bars are redrawn every `refresh_rate` batches (0 disables the bar; the `TQDM_MINITERS` environment variable
    raises it, and on Colab the default becomes 20). Nothing is drawn when stdout is not a terminal, so the default
    bar costs nothing in CI or under pytest. `process_position` offsets the bars by that many pairs of lines;
    `leave` keeps each finished epoch's bar on screen. Override `init_sanity_tqdm`, `init_train_tqdm`,
    `init_validation_tqdm`, `init_test_tqdm` or `init_predict_tqdm` to style a bar.
    """

    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__()
        if not _is_non_negative_int(refresh_rate):
            raise ValueError(f"refresh_rate {refresh_rate!r} must be an int >= 0 (0 disables the bar)")
        if not _is_non_negative_int(process_position):
            raise ValueError(f"process_position {process_position!r} must be an int >= 0")
        if not isinstance(leave, bool):
            raise ValueError(f"leave {leave!r} must be a bool")
        self._refresh_rate = _resolve_refresh_rate(refresh_rate)
        self._process_position = process_position
        self._leave = leave
        self._train_progress_bar: Any = None
        self._val_progress_bar: Any = None
        self._test_progress_bar: Any = None
        self._predict_progress_bar: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # a tqdm holds its stream and a lock: the callback pickles (spawned processes, deepcopy) without its bars
        return {key: None if isinstance(value, _tqdm) else value for key, value in vars(self).items()}

    @property
    def train_progress_bar(self) -> Any:
        return self._bar("_train_progress_bar")

    @train_progress_bar.setter
    def train_progress_bar(self, bar: Any) -> None:
        self._train_progress_bar = bar

    @property
    def val_progress_bar(self) -> Any:
        return self._bar("_val_progress_bar")

    @val_progress_bar.setter
    def val_progress_bar(self, bar: Any) -> None:
        self._val_progress_bar = bar

    @property
    def test_progress_bar(self) -> Any:
        return self._bar("_test_progress_bar")

    @test_progress_bar.setter
    def test_progress_bar(self, bar: Any) -> None:
        self._test_progress_bar = bar

    @property
    def predict_progress_bar(self) -> Any:
        return self._bar("_predict_progress_bar")

    @predict_progress_bar.setter
    def predict_progress_bar(self, bar: Any) -> None:
        self._predict_progress_bar = bar

    def _bar(self, attribute: str) -> Any:
        bar = getattr(self, attribute)
        if bar is None:
            raise TypeError(f"The `{self.__class__.__name__}.{attribute}` reference has not been set yet.")
        return bar

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def process_position(self) -> int:
        return self._process_position

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self.refresh_rate > 0

    # the bars, made here so a subclass can restyle them

    def init_sanity_tqdm(self) -> Tqdm:
        """The sanity check's bar."""
        return self._new_bar(self.sanity_check_description, 2 * self.process_position, leave=False)

    def init_train_tqdm(self) -> Tqdm:
        """The training bar, renamed `Epoch N` each epoch."""
        return self._new_bar(self.train_description, 2 * self.process_position, leave=True, smoothing=0)

    def init_predict_tqdm(self) -> Tqdm:
        """The predict run's bar."""
        return self._new_bar(self.predict_description, 2 * self.process_position, leave=True, smoothing=0)

    def init_validation_tqdm(self) -> Tqdm:
        """The validation bar: under fit it sits below the epoch's bar and goes when done; a validate run keeps it."""
        under_fit = self.trainer.state.fn != "validate"
        return self._new_bar(self.validation_description, 2 * self.process_position + under_fit, leave=not under_fit)

    def init_test_tqdm(self) -> Tqdm:
        """The test run's bar."""
        return self._new_bar(self.test_description, 2 * self.process_position, leave=True)

    def _new_bar(self, description: str, position: int, leave: bool, **options: Any) -> Tqdm:
        return Tqdm(
            desc=description,
            position=position,
            disable=self.is_disabled or not _stdout_is_terminal(),
            leave=leave,
            dynamic_ncols=True,
            file=sys.stdout,
            bar_format=self.BAR_FORMAT,
            **options,
        )

    # sanity check and training

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.val_progress_bar = self.init_sanity_tqdm()
        # a silent stand-in, so the training bar slot is never empty while the sanity check prints
        self.train_progress_bar = Tqdm(disable=True)

    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        self.val_progress_bar.close()
        self.train_progress_bar.close()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.train_progress_bar = self.init_train_tqdm()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        _restart(self.train_progress_bar, self.total_train_batches, f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self.train_progress_bar
        if self._should_update(batch_idx + 1, bar.total):
            _update_n(bar, batch_idx + 1)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        bar = self.train_progress_bar
        if not bar.disable:
            bar.set_postfix(self.get_metrics(trainer, pl_module))
        if self._leave:
            bar.close()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.train_progress_bar.close()

    # validation, test and predict

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.val_progress_bar = self.init_validation_tqdm()

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            name = self.sanity_check_description if trainer.sanity_checking else self.validation_description
            total = self.total_val_batches_current_dataloader
            _restart(self.val_progress_bar, total, f"{name} DataLoader {dataloader_idx}")

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance(self.val_progress_bar, batch_idx)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.val_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        # validation may have logged new prog_bar metrics: the epoch's bar shows them now
        if self._train_progress_bar is not None and trainer.state.fn == "fit":
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self.test_progress_bar = self.init_test_tqdm()

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            total = self.total_test_batches_current_dataloader
            _restart(self.test_progress_bar, total, f"{self.test_description} DataLoader {dataloader_idx}")

    def on_test_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance(self.test_progress_bar, batch_idx)

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        self.test_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self.predict_progress_bar = self.init_predict_tqdm()

    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            total = self.total_predict_batches_current_dataloader
            _restart(self.predict_progress_bar, total, f"{self.predict_description} DataLoader {dataloader_idx}")

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance(self.predict_progress_bar, batch_idx)

    def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
        self.predict_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def _advance(self, bar: Any, batch_idx: int) -> None:
        if self._should_update(batch_idx + 1, bar.total):
            _update_n(bar, batch_idx + 1)

    def _should_update(self, current: int, total: int | None) -> bool:
        # the last batch always redraws, so a finished bar never shows a stale count
        return self.is_enabled and (current % self.refresh_rate == 0 or current == total)

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """Write above the bar that is drawing (training first, then validation, test, predict), so the bar is
        redrawn below the text instead of being broken by it; plain `print` when no bar is drawing."""
        bar = self._drawing_bar()
        if bar is None:
            print(*args, sep=sep, **kwargs)
        else:
            bar.write(sep.join(map(str, args)), **kwargs)

    def _drawing_bar(self) -> Any:
        bars = (self._train_progress_bar, self._val_progress_bar, self._test_progress_bar, self._predict_progress_bar)
        return next((bar for bar in bars if bar is not None and not bar.disable), None)


def _resolve_refresh_rate(refresh_rate: int) -> int:
    if os.environ.get("COLAB_GPU") and refresh_rate == 1:
        # Colab's output cell crashes under frequent redraws
        rank_zero_debug("Using a higher refresh rate on Colab. Setting it to `20`")
        return _COLAB_REFRESH_RATE
    raw = os.environ.get("TQDM_MINITERS")
    if raw is None:
        return refresh_rate
    try:
        floor = int(raw)
    except ValueError as error:
        raise ValueError(
            f"{error}: the TQDM_MINITERS environment variable must be an int (bars redraw every that "
            "many batches at least)"
        ) from error
    return max(floor, refresh_rate)


def _restart(bar: Any, total: int | float, description: str) -> None:
    """Empty `bar` for a new epoch or dataloader of `total` batches."""
    bar.reset()
    bar.total = convert_inf(total)
    bar.initial = 0
    bar.set_description(description)


def _update_n(bar: Any, value: int) -> None:
    # n is set, not incremented, so a run resumed mid-epoch shows its true position
    if not bar.disable:
        bar.n = value
        bar.refresh()


def convert_inf(x: int | float | None) -> int | float | None:
    """tqdm's total: None (a counter without a bar) for an unknown or infinite count."""
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return x


def _stdout_is_terminal() -> bool:
    """Bars only make sense on a terminal; in a log file or a captured stream they are noise."""
    isatty = getattr(sys.stdout, "isatty", None)
    return callable(isatty) and bool(isatty())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
