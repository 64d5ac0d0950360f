"""Lightning's loop objects as users read them (`trainer.validate_loop.batch_progress`, ...): thin views over the
trainer's own progress counters and loaders, so there is one source of truth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stages.progress import BatchProgress, Progress

if TYPE_CHECKING:
    from stages.contract import TrainerView

_PROGRESS = {"val": "validate_progress", "test": "test_progress", "predict": "predict_progress"}
_LOADERS = {"val": "val_dataloaders", "test": "test_dataloaders", "predict": "predict_dataloaders"}
_BATCHES = {"val": "num_val_batches", "test": "num_test_batches", "predict": "num_predict_batches"}


class EvaluationLoopView:
    """`trainer.validate_loop`, `trainer.test_loop` or `trainer.predict_loop`."""

    def __init__(self, trainer: TrainerView, kind: str) -> None:
        if kind not in _PROGRESS:
            raise ValueError(f"loop kind {kind!r} is not one of {sorted(_PROGRESS)}")
        self._trainer = trainer
        self._kind = kind

    @property
    def batch_progress(self) -> BatchProgress:
        return getattr(self._trainer, _PROGRESS[self._kind])

    @property
    def dataloaders(self) -> Any:
        """The loaders of the last run, as they were given."""
        return getattr(self._trainer, _LOADERS[self._kind])

    @property
    def max_batches(self) -> list[int | float]:
        """Batches each loader of the last run gives under the limits."""
        return getattr(self._trainer, _BATCHES[self._kind])

    @property
    def num_dataloaders(self) -> int:
        return len(self.max_batches)


class FitValidationLoopView:
    """`trainer.fit_loop.epoch_loop.val_loop`: the validation runs inside fit."""

    def __init__(self, fit_loop: Any) -> None:
        self._fit_loop = fit_loop

    @property
    def batch_progress(self) -> BatchProgress:
        return self._fit_loop.val_progress

    @property
    def dataloaders(self) -> Any:
        return self._fit_loop.trainer.val_dataloaders

    @property
    def max_batches(self) -> list[int | float]:
        return self._fit_loop.trainer.num_val_batches


class TrainingEpochLoopView:
    """`trainer.fit_loop.epoch_loop`: the batches of a training epoch."""

    def __init__(self, fit_loop: Any) -> None:
        self._fit_loop = fit_loop
        self.val_loop = FitValidationLoopView(fit_loop)

    @property
    def batch_progress(self) -> BatchProgress:
        return self._fit_loop.batch_progress

    @property
    def scheduler_progress(self) -> Progress:
        return self._fit_loop.scheduler_progress

    @property
    def batch_idx(self) -> int:
        return self._fit_loop.batch_progress.current.ready - 1

    @property
    def total_batch_idx(self) -> int:
        return self._fit_loop.total_batch_idx

    @property
    def global_step(self) -> int:
        return self._fit_loop.global_step

    @property
    def max_steps(self) -> int:
        return self._fit_loop.trainer.max_steps

    @property
    def _batches_that_stepped(self) -> int:
        return self._fit_loop.batches_that_stepped
