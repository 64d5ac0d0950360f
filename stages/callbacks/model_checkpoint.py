"""ModelCheckpoint: saves checkpoints during fit, keeps the best k by a monitored metric, and a `last` one."""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec
import torch
import yaml
from fsspec.implementations.local import LocalFileSystem

from devices.checkpoint_io import remove_stale_temporaries
from stages.callbacks.callback import Checkpoint
from stages.exceptions import MisconfigurationException, TrainerWarning

log = logging.getLogger(__name__)

# One `{name}` or `{name:format_spec}` field of a filename template.
_TEMPLATE_FIELD = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
_MODES = ("min", "max")


class ModelCheckpoint(Checkpoint):
    """Saves a checkpoint every `every_n_epochs` epochs, every `every_n_train_steps` steps or every
    `train_time_interval`, keeping the `save_top_k` best by `monitor` (or the newest without a monitor).

    `save_last=True` writes `last.ckpt` with each save, and `"link"` makes it a symlink to the latest save (local
    directories only).
    Nothing is saved under fast_dev_run, outside fit, during the sanity check, or twice at one global step.
    """

    CHECKPOINT_JOIN_CHAR = "-"
    CHECKPOINT_EQUALS_CHAR = "="
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | str | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        _validate_names(dirpath, filename, monitor)
        _validate_options(save_last, save_top_k, mode, save_on_train_epoch_end)
        _validate_triggers(every_n_train_steps, every_n_epochs, train_time_interval)
        if monitor is None and save_top_k not in (-1, 0, 1):
            raise MisconfigurationException(
                f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None) is not a valid configuration. No"
                " quantity for top_k to track. Use save_top_k in (-1, 0, 1) or set `monitor`."
            )
        self.monitor = monitor
        self.verbose = verbose
        self.save_last = save_last
        self.save_top_k = save_top_k
        self.save_on_exception = save_on_exception
        self.save_weights_only = save_weights_only
        self.mode = mode
        self.auto_insert_metric_name = auto_insert_metric_name
        self._save_on_train_epoch_end = save_on_train_epoch_end
        self._enable_version_counter = enable_version_counter
        self.dirpath: str | None = _normalize_user_dirpath(dirpath)
        self.filename = filename
        self._fs: fsspec.AbstractFileSystem = _filesystem(self.dirpath or "")
        self._init_triggers(every_n_train_steps, every_n_epochs, train_time_interval)

        self.kth_value = torch.tensor(torch.inf if mode == "min" else -torch.inf)
        self.best_k_models: dict[str, torch.Tensor] = {}
        self.kth_best_model_path = ""
        self.best_model_score: torch.Tensor | None = None
        self.best_model_path = ""
        self.last_model_path = ""
        self.current_score: torch.Tensor | None = None

        # No steps taken means nothing new to save, hence 0 rather than None.
        self._last_global_step_saved = 0
        self._last_checkpoint_saved = ""
        self._last_time_checked: float | None = None
        self._defer_save_until_validation = False
        # A hook's saves that an exception cut short: on_exception must not count them as done.
        self._save_point_open = False
        # `last`'s path, chosen at the first save of a save point so every file written there records it.
        self._last_claimed_step: int | None = None
        self._last_replaced = ""

    def _init_triggers(
        self,
        every_n_train_steps: int | None,
        every_n_epochs: int | None,
        train_time_interval: timedelta | None,
    ) -> None:
        if every_n_train_steps is None and every_n_epochs is None and train_time_interval is None:
            every_n_epochs, every_n_train_steps = 1, 0
        self._every_n_train_steps = every_n_train_steps or 0
        self._every_n_epochs = every_n_epochs or 0
        self._train_time_interval = train_time_interval
        # Most checkpoints save at epoch ends only: their batch ends have nothing to check.
        self._saves_within_epochs = self._every_n_train_steps >= 1 or train_time_interval is not None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(
            monitor=self.monitor,
            mode=self.mode,
            every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs,
            train_time_interval=self._train_time_interval,
        )

    @property
    def every_n_epochs(self) -> int | None:
        """Epochs between top-k saves; 0 when saves follow steps or time instead."""
        return self._every_n_epochs

    # ---- hooks ----

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.dirpath = trainer.strategy.broadcast(self._resolve_dirpath(trainer))
        self._fs = _filesystem(self.dirpath)
        if self.save_last == "link" and not isinstance(self._fs, LocalFileSystem):
            raise ValueError(
                "`ModelCheckpoint(save_last='link')` is only supported for local file paths, got"
                f" `dirpath={self.dirpath}`. Use save_last=True to write a copy there."
            )
        self._save_point_open = False
        self._last_claimed_step = None
        if trainer.is_global_zero and stage == "fit":
            for path in remove_stale_temporaries(self.dirpath):
                log.info(f"removed {path!r}, left by a save that was cut short")
            self._warn_if_dir_not_empty()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._last_time_checked = time.monotonic()

    def _idle_hooks(self) -> frozenset[str]:
        """Without `every_n_train_steps` or `train_time_interval`, nothing is saved from inside an epoch: the batch
        end hook (and the outputs the trainer builds for it) can be left out of every batch."""
        own = type(self).on_train_batch_end is ModelCheckpoint.on_train_batch_end and "on_train_batch_end" not in vars(
            self
        )
        return frozenset() if self._saves_within_epochs or not own else frozenset({"on_train_batch_end"})

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self._saves_within_epochs or not self._step_trigger_due(trainer):
            return
        candidates = self._monitor_candidates(trainer)
        if self._should_defer(trainer, candidates, batch_idx):
            self._defer_save_until_validation = True
            return
        if not self._should_skip_saving_checkpoint(trainer):
            with self._save_point():
                self._save_topk_checkpoint(trainer, candidates, strict=False)
                self._save_last_checkpoint(trainer, candidates)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._should_skip_saving_checkpoint(trainer) or not self._should_save_on_train_epoch_end(trainer):
            return
        with self._save_point():
            self._save_epoch_checkpoints(trainer, strict=False)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        # Consume the deferral even when this validation cannot save, so a stale one never fires later.
        deferred, self._defer_save_until_validation = self._defer_save_until_validation, False
        if self._should_skip_saving_checkpoint(trainer):
            return
        with self._save_point():
            if deferred:
                candidates = self._monitor_candidates(trainer)
                self._save_topk_checkpoint(trainer, candidates, strict=True)
                self._save_last_checkpoint(trainer, candidates)
            elif not self._should_save_on_train_epoch_end(trainer):
                self._save_epoch_checkpoints(trainer, strict=True)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.save_last and not self._last_checkpoint_saved and not self._should_skip_saving_checkpoint(trainer):
            with self._save_point():
                self._write_last(trainer, self._monitor_candidates(trainer))

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if not self.save_on_exception:
            return
        # A save point the exception cut short (say, during the `last` write) left files one save behind.
        if self._should_skip_saving_checkpoint(trainer) and not self._save_point_open:
            return
        candidates = self._monitor_candidates(trainer)
        # The plain template name, as Lightning writes it: no prefix and no version suffix, so
        # `filename="exception"` gives `exception.ckpt` and a file of that name is replaced.
        filepath = self.format_checkpoint_name(candidates)
        self._save_checkpoint(trainer, filepath)
        self._save_last_checkpoint(trainer, candidates)
        self._save_point_open = False
        log.info(f"{type(exception).__name__} raised with message {str(exception)!r}; saved checkpoint {filepath}")

    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "current_score": self.current_score,
            "dirpath": self.dirpath,
            "best_k_models": self.best_k_models,
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved_dirpath = state_dict.get("dirpath", self.dirpath)
        if saved_dirpath == self.dirpath:
            self.best_model_score = state_dict["best_model_score"]
            self.kth_best_model_path = state_dict.get("kth_best_model_path", self.kth_best_model_path)
            self.kth_value = state_dict.get("kth_value", self.kth_value)
            self.best_k_models = state_dict.get("best_k_models", self.best_k_models)
            self.last_model_path = state_dict.get("last_model_path", self.last_model_path)
        else:
            # The ranked files live in the old directory; ranking against them would delete files elsewhere.
            warnings.warn(
                f"The dirpath has changed from {saved_dirpath!r} to {self.dirpath!r}, therefore"
                " `best_model_score`, `kth_best_model_path`, `kth_value`, `last_model_path` and"
                " `best_k_models` won't be reloaded. Only `best_model_path` will be reloaded.",
                TrainerWarning,
                stacklevel=2,
            )
        self.best_model_path = state_dict["best_model_path"]

    # ---- naming ----

    def format_checkpoint_name(
        self,
        metrics: dict[str, Any],
        filename: str | None = None,
        ver: int | None = None,
        prefix: str | None = None,
    ) -> str:
        """The checkpoint path for `metrics`: the filled-in template, prefix, `-v<ver>`, extension, dirpath.
        A template field missing from `metrics` is added to it as 0.

        >>> ModelCheckpoint(filename="{epoch}-{val_loss:.2f}").format_checkpoint_name(
        ...     {"epoch": torch.tensor(2), "val_loss": torch.tensor(0.1234)})
        'epoch=2-val_loss=0.12.ckpt'
        """
        name = self._fill_template(
            filename or self.filename or f"{{epoch}}{self.CHECKPOINT_JOIN_CHAR}{{step}}", metrics
        )
        if prefix is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join((prefix, name))
        if ver is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join((name, f"v{ver}"))
        name += self.FILE_EXTENSION
        return os.path.join(self.dirpath, name) if self.dirpath else name

    def _fill_template(self, template: str, metrics: dict[str, Any]) -> str:
        def fill(field: re.Match[str]) -> str:
            name, spec = field.group(1), field.group(2) or ""
            # A metric missing from `metrics` prints as 0, so a template never fails on it.
            value = format(_plain(metrics.setdefault(name, torch.tensor(0))), spec)
            return f"{name}{self.CHECKPOINT_EQUALS_CHAR}{value}" if self.auto_insert_metric_name else value

        return _TEMPLATE_FIELD.sub(fill, template)

    def _unique_path(
        self,
        trainer: Any,
        metrics: dict[str, Any],
        filename: str | None = None,
        reusable: str | None = None,
        taken: str | None = None,
    ) -> str:
        """The formatted path, with `-v1`, `-v2`, ... added while it names an existing file other than
        `reusable` (a file this save replaces), or `taken` (a file about to be written)."""
        filepath = self.format_checkpoint_name(metrics, filename)
        if not self._enable_version_counter:
            return filepath
        version = self.STARTING_VERSION
        while filepath != reusable and (filepath == taken or self.file_exists(filepath, trainer)):
            filepath = self.format_checkpoint_name(metrics, filename, ver=version)
            version += 1
        return filepath

    def _resolve_dirpath(self, trainer: Any) -> str:
        if self.dirpath is not None:
            return self.dirpath
        if trainer.loggers:
            logger = trainer.loggers[0]
            save_dir = logger.save_dir or trainer.default_root_dir
            version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
            return os.path.join(save_dir, str(logger.name), version, "checkpoints")
        return os.path.join(trainer.default_root_dir, "checkpoints")

    def _warn_if_dir_not_empty(self) -> None:
        assert self.dirpath is not None
        if self.save_top_k != 0 and self._fs.isdir(self.dirpath) and self._fs.ls(self.dirpath):
            warnings.warn(f"Checkpoint directory {self.dirpath} exists and is not empty.", TrainerWarning, stacklevel=2)

    # ---- when to save ----

    def _should_skip_saving_checkpoint(self, trainer: Any) -> bool:
        return (
            bool(trainer.fast_dev_run)
            or trainer.state.fn != "fit"
            or trainer.sanity_checking
            or self._last_global_step_saved == trainer.global_step
        )

    def _should_save_on_train_epoch_end(self, trainer: Any) -> bool:
        if self._save_on_train_epoch_end is not None:
            return self._save_on_train_epoch_end
        interval = trainer.val_check_interval
        # Time-based validation has no fixed place in the epoch, so only its end sees fresh metrics.
        if isinstance(interval, (str, dict, timedelta)):
            return False
        # Validation not every epoch: saving at train-epoch end would rank stale values.
        if trainer.check_val_every_n_epoch != 1:
            return False
        if sum(trainer.num_val_batches) == 0:
            return True
        return (1.0 if interval is None else interval) == 1.0

    def _step_trigger_due(self, trainer: Any) -> bool:
        by_steps = self._every_n_train_steps >= 1 and trainer.global_step % self._every_n_train_steps == 0
        # The clock is checked first and unconditionally: a due interval restarts it.
        return self._train_time_elapsed(trainer) or by_steps

    def _train_time_elapsed(self, trainer: Any) -> bool:
        if self._train_time_interval is None or self._last_time_checked is None:
            return False
        now = time.monotonic()
        elapsed = now - self._last_time_checked >= self._train_time_interval.total_seconds()
        # Rank 0's clock decides, so all ranks save together.
        elapsed = bool(trainer.strategy.broadcast(elapsed))
        if elapsed:
            self._last_time_checked = now
        return elapsed

    def _should_defer(self, trainer: Any, candidates: dict[str, Any], batch_idx: int) -> bool:
        """A step save waits for `on_validation_end` when it would rank a missing or stale metric."""
        if self.monitor is None:
            return False
        if self.monitor not in candidates:
            return True
        last_batch = batch_idx + 1 == trainer.num_training_batches
        return last_batch and not self._should_save_on_train_epoch_end(trainer) and _epoch_validates(trainer)

    # ---- saving ----

    @contextmanager
    def _save_point(self) -> Iterator[None]:
        """Marks a hook's saves as in progress; an exception leaves the mark set (no finally on purpose)."""
        self._save_point_open = True
        yield
        self._save_point_open = False
        self._last_claimed_step = None

    def _save_epoch_checkpoints(self, trainer: Any, strict: bool) -> None:
        candidates = self._monitor_candidates(trainer)
        if self._every_n_epochs >= 1 and (trainer.current_epoch + 1) % self._every_n_epochs == 0:
            self._save_topk_checkpoint(trainer, candidates, strict)
        self._save_last_checkpoint(trainer, candidates)

    def _monitor_candidates(self, trainer: Any) -> dict[str, Any]:
        candidates = dict(trainer.callback_metrics)
        # `self.log("epoch", ...)` stores a float and names need the int; anything else becomes the counter.
        epoch, step = candidates.get("epoch"), candidates.get("step")
        candidates["epoch"] = epoch.int() if isinstance(epoch, torch.Tensor) else torch.tensor(trainer.current_epoch)
        candidates["step"] = step.int() if isinstance(step, torch.Tensor) else torch.tensor(trainer.global_step)
        return candidates

    def _save_topk_checkpoint(self, trainer: Any, candidates: dict[str, Any], strict: bool) -> None:
        """`strict`: the save point follows in-fit validation, so a missing monitor key is an error."""
        if self.save_top_k == 0:
            return
        if self.monitor is None:
            self._save_none_monitor_checkpoint(trainer, candidates)
        elif self.monitor not in candidates:
            # Once an in-fit validation has run, a missing key can no longer be a metric still to come.
            self._report_missing_monitor(candidates, strict or trainer.fit_loop.val_progress.current.completed > 0)
        else:
            self._save_monitor_checkpoint(trainer, candidates)

    def _report_missing_monitor(self, candidates: dict[str, Any], strict: bool) -> None:
        message = (
            f"`ModelCheckpoint(monitor={self.monitor!r})` could not find the monitored key in the returned"
            f" metrics: {list(candidates)}. HINT: Did you call `log({self.monitor!r}, value)` in the"
            " `LightningModule`?"
        )
        if strict:
            raise MisconfigurationException(message)
        warnings.warn(message, TrainerWarning, stacklevel=2)

    def check_monitor_top_k(self, trainer: Any, current: torch.Tensor | None = None) -> bool:
        """Whether `current` earns a place among the best `save_top_k`."""
        if current is None:
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        kth_score = self.best_k_models[self.kth_best_model_path]
        better = bool(torch.lt(current, kth_score) if self.mode == "min" else torch.gt(current, kth_score))
        # Ranks whose unsynced values disagree must still save together (the save waits at a barrier).
        return trainer.strategy.reduce_boolean_decision(better, all=True)

    def _save_monitor_checkpoint(self, trainer: Any, candidates: dict[str, Any]) -> None:
        assert self.monitor is not None
        current = torch.as_tensor(candidates[self.monitor]).detach().clone()
        if self.check_monitor_top_k(trainer, current):
            self._update_best_and_save(current, trainer, candidates)
        elif self.verbose:
            log.info(f"{_progress(candidates)}: {self.monitor!r} was not in top {self.save_top_k}")

    def _update_best_and_save(self, current: torch.Tensor, trainer: Any, candidates: dict[str, Any]) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        evicted = self.kth_best_model_path if len(self.best_k_models) == k else None
        if evicted is not None:
            self.best_k_models.pop(evicted)
        if torch.isnan(current):
            # NaN compares false with everything; store it as the worst possible score instead.
            current = torch.tensor(torch.inf if self.mode == "min" else -torch.inf)
        filepath = self._unique_path(trainer, candidates, reusable=evicted)
        self.current_score = current
        self.best_k_models[filepath] = current
        self._update_ranking(k)
        if self.verbose:
            log.info(
                f"{_progress(candidates)}: {self.monitor!r} reached {float(current):0.5f}"
                f" (best {float(self.best_model_score or current):0.5f}), saving model to {filepath!r} as top {k}"
            )
        self._save_checkpoint(trainer, filepath)
        if evicted and self._should_remove_checkpoint(trainer, evicted, filepath):
            self._remove_checkpoint(trainer, evicted)

    def _update_ranking(self, k: int) -> None:
        def score(path: str) -> float:
            return float(self.best_k_models[path])

        worst, best = (max, min) if self.mode == "min" else (min, max)
        if len(self.best_k_models) == k:
            self.kth_best_model_path = worst(self.best_k_models, key=score)
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        self.best_model_path = best(self.best_k_models, key=score)
        self.best_model_score = self.best_k_models[self.best_model_path]

    def _save_none_monitor_checkpoint(self, trainer: Any, candidates: dict[str, Any]) -> None:
        # With save_top_k=1 the new file replaces the previous one, so it may take its name; with -1 all stay.
        reusable = self.best_model_path if self.save_top_k == 1 else None
        filepath = self._unique_path(trainer, candidates, reusable=reusable)
        # Set before saving: the path is part of the state written into the checkpoint.
        previous, self.best_model_path = self.best_model_path, filepath
        if self.verbose:
            log.info(f"{_progress(candidates)}: saving model to {filepath}")
        self._save_checkpoint(trainer, filepath)
        if self.save_top_k == 1 and previous and self._should_remove_checkpoint(trainer, previous, filepath):
            self._remove_checkpoint(trainer, previous)

    def _save_last_checkpoint(self, trainer: Any, candidates: dict[str, Any]) -> None:
        """`last` follows a save at this global step; in link mode it always points at the latest save."""
        if not self.save_last:
            return
        if self.save_last == "link" or self._last_global_step_saved == trainer.global_step:
            self._write_last(trainer, candidates)

    def _write_last(self, trainer: Any, candidates: dict[str, Any]) -> None:
        self._claim_last(trainer, candidates)
        filepath, previous = self.last_model_path, self._last_replaced
        self._last_claimed_step = None
        target = self._last_checkpoint_saved
        if self.save_last == "link" and self.save_top_k != 0 and target:
            self._link_checkpoint(trainer, target, filepath)
        else:
            self._save_checkpoint(trainer, filepath, is_last=True)
        if previous and self._should_remove_checkpoint(trainer, previous, filepath):
            self._remove_checkpoint(trainer, previous)

    def _claim_last(self, trainer: Any, candidates: dict[str, Any], about_to_write: str | None = None) -> None:
        """Choose `last`'s path once per save point, before its first file is written.

        The path is part of the state in every file: a run resumed from any of them (an `exception-*.ckpt`
        too) knows which `last` it owns and keeps overwriting it instead of starting `last-v1.ckpt`.
        """
        if self._last_claimed_step == trainer.global_step:
            return
        self._last_replaced = self.last_model_path
        self.last_model_path = self._unique_path(
            trainer, candidates, self.CHECKPOINT_NAME_LAST, reusable=self.last_model_path, taken=about_to_write
        )
        self._last_claimed_step = trainer.global_step

    def _save_checkpoint(self, trainer: Any, filepath: str, is_last: bool = False) -> None:
        if self.save_last and not is_last:
            self._claim_last(trainer, self._monitor_candidates(trainer), about_to_write=filepath)
        trainer.save_checkpoint(filepath, weights_only=self.save_weights_only)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(self)

    def _link_checkpoint(self, trainer: Any, target: str, linkpath: str) -> None:
        """`linkpath` becomes a relative symlink to `target`; a save under the link's own name is left as it is."""
        if trainer.is_global_zero and os.path.abspath(target) != os.path.abspath(linkpath):
            _symlink_or_copy(target, linkpath)
        # No rank reads `last` before rank 0 has made it.
        trainer.strategy.barrier()

    # ---- files ----

    def to_yaml(self, filepath: str | os.PathLike[str] | None = None) -> None:
        """Writes `best_k_models` as `{path: score}` YAML, by default to `<dirpath>/best_k_models.yaml`."""
        if filepath is None:
            if not self.dirpath:
                raise AssertionError(
                    "ModelCheckpoint.to_yaml() without a filepath writes into `dirpath`, which is None until the"
                    " callback is set up by a fit; pass a filepath."
                )
            filepath = os.path.join(self.dirpath, "best_k_models.yaml")
        best_k = {path: score.item() for path, score in self.best_k_models.items()}
        with fsspec.open(os.fspath(filepath), "w") as out:
            yaml.dump(best_k, out)

    def file_exists(self, filepath: str | os.PathLike[str], trainer: Any) -> bool:
        """Whether `filepath` exists, as global rank 0 sees it, on every rank (so all pick the same name)."""
        exists = self._fs.exists(os.fspath(filepath)) if trainer.is_global_zero else False
        return bool(trainer.strategy.reduce_boolean_decision(exists, all=False))

    def _should_remove_checkpoint(self, trainer: Any, previous: str, current: str) -> bool:
        """Never delete the file just written, the one this run resumed from, or a local file elsewhere."""
        if previous == current:
            return False
        if not isinstance(self._fs, LocalFileSystem):
            return True
        previous_path = Path(previous).absolute()
        resumed_from = getattr(trainer, "ckpt_path", None)
        if resumed_from is not None and Path(resumed_from).absolute() == previous_path:
            return False
        assert self.dirpath is not None
        return Path(self.dirpath).absolute() in previous_path.parents

    def _remove_checkpoint(self, trainer: Any, filepath: str) -> None:
        # The strategy knows what a checkpoint is (a file, or a sharded folder); one already gone is no error.
        trainer.strategy.remove_checkpoint(filepath)


def _epoch_validates(trainer: Any) -> bool:
    every_n = trainer.check_val_every_n_epoch
    return sum(trainer.num_val_batches) > 0 and (every_n is None or (trainer.current_epoch + 1) % every_n == 0)


def _progress(candidates: dict[str, Any]) -> str:
    return f"Epoch {int(candidates['epoch'])}, global step {int(candidates['step'])}"


def _plain(value: Any) -> Any:
    """A one-element tensor as its Python number, so format specs like `.2f` apply to it."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _filesystem(path: str) -> fsspec.AbstractFileSystem:
    return fsspec.core.url_to_fs(path)[0]


def _normalize_user_dirpath(dirpath: str | os.PathLike[str] | None) -> str | None:
    """Local directories become absolute real paths, so the checkpoint paths stay valid after a chdir."""
    if dirpath is None:
        return None
    dirpath = os.fspath(dirpath)
    if not isinstance(_filesystem(dirpath), LocalFileSystem):
        return dirpath
    return os.path.realpath(os.path.expanduser(dirpath.removeprefix("file://")))


def _symlink_or_copy(target: str, linkpath: str) -> None:
    if os.path.isdir(linkpath) and not os.path.islink(linkpath):
        shutil.rmtree(linkpath)
    elif os.path.lexists(linkpath):
        os.remove(linkpath)
    try:
        os.symlink(os.path.relpath(target, os.path.dirname(linkpath)), linkpath)
    except OSError:
        # Windows needs special rights for symlinks; a copy keeps `last` usable.
        shutil.copy(target, linkpath)


def _validate_names(dirpath: str | os.PathLike[str] | None, filename: str | None, monitor: str | None) -> None:
    if dirpath is not None and not isinstance(dirpath, (str, os.PathLike)):
        raise TypeError(f"ModelCheckpoint(dirpath={dirpath!r}) must be a str, a path or None.")
    if filename is not None and not isinstance(filename, str):
        raise TypeError(f"ModelCheckpoint(filename={filename!r}) must be a str template or None.")
    if monitor is not None and not isinstance(monitor, str):
        raise TypeError(f"ModelCheckpoint(monitor={monitor!r}) must be a logged metric name or None.")


def _validate_options(save_last: Any, save_top_k: int, mode: str, save_on_train_epoch_end: bool | None) -> None:
    if mode not in _MODES:
        raise MisconfigurationException(f"`mode` can be {', '.join(_MODES)} but got {mode}")
    if not (save_last is None or isinstance(save_last, bool) or save_last == "link"):
        raise MisconfigurationException(
            f"ModelCheckpoint(save_last={save_last!r}) is not supported; use None, True, False or 'link'."
        )
    if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1:
        raise MisconfigurationException(
            f"Invalid value for save_top_k={save_top_k}. Must be >= -1{_int_detail(save_top_k)}"
        )
    if save_on_train_epoch_end is not None and not isinstance(save_on_train_epoch_end, bool):
        raise TypeError(
            f"ModelCheckpoint(save_on_train_epoch_end={save_on_train_epoch_end!r}) must be True, False or None."
        )


def _int_detail(value: Any) -> str:
    """Our own addition to Lightning's range message, for a value that is not an int at all."""
    if isinstance(value, int) and not isinstance(value, bool):
        return ""
    return f" and an int, got {type(value).__name__}"


def _validate_triggers(
    every_n_train_steps: int | None, every_n_epochs: int | None, train_time_interval: timedelta | None
) -> None:
    for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise MisconfigurationException(f"Invalid value for {name}={value}. Must be >= 0{_int_detail(value)}")
    if train_time_interval is not None and not isinstance(train_time_interval, timedelta):
        raise TypeError(
            f"ModelCheckpoint(train_time_interval={train_time_interval!r}) must be a datetime.timedelta or None."
        )
    if train_time_interval is not None and train_time_interval < timedelta(0):
        raise MisconfigurationException(f"Invalid value for train_time_interval={train_time_interval}. Must be >= 0")
    # As Lightning shows them: unset counts become 0 once any trigger is set.
    steps, epochs = every_n_train_steps or 0, every_n_epochs or 0
    if (steps >= 1) + (epochs >= 1) + (train_time_interval is not None) > 1:
        raise MisconfigurationException(
            f"Combination of parameters every_n_train_steps={steps}, every_n_epochs={epochs} and"
            f" train_time_interval={train_time_interval} should be mutually exclusive."
        )
