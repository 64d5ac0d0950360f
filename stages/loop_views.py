"""Lightning's loop objects as users read them (`trainer.validate_loop.batch_progress`, ...): thin views over the
trainer's own progress counters and loaders, so there is one source of truth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stages.progress import BatchProgress, Progress, StepProgress, ZeroGradProgress

if TYPE_CHECKING:
    from stages.contract import TrainerView

_PROGRESS = {"val": "validate_progress", "test": "test_progress", "predict": "predict_progress"}


def _eval_state(progress: BatchProgress, keep_last_batch: bool = True) -> dict[str, Any]:
    """An evaluation loop's entry in a checkpoint's `loops` (predict stores no `is_last_batch`)."""
    state = progress.state_dict()
    if not keep_last_batch:
        del state["is_last_batch"]
    return {"state_dict": {}, "batch_progress": state}


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

    def state_dict(self) -> dict[str, Any]:
        return _eval_state(self.batch_progress, keep_last_batch=self._kind != "predict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batch_progress.load_state_dict(state["batch_progress"])


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

    def state_dict(self) -> dict[str, Any]:
        return _eval_state(self.batch_progress)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batch_progress.load_state_dict(state["batch_progress"])


class OptimizerProgressView:
    """`optim_progress.optimizer`: the automatic optimizer's step and zero_grad counters."""

    def __init__(self, fit_loop: Any) -> None:
        self._fit_loop = fit_loop

    @property
    def step(self) -> StepProgress:
        return self._fit_loop.optimizer_step_progress

    @property
    def zero_grad(self) -> ZeroGradProgress:
        return self._fit_loop.zero_grad_progress

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step.state_dict(), "zero_grad": self.zero_grad.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step.load_state_dict(state["step"])
        self.zero_grad.load_state_dict(state["zero_grad"])


class OptimizationProgressView:
    """`automatic_optimization.optim_progress`."""

    def __init__(self, fit_loop: Any) -> None:
        self.optimizer = OptimizerProgressView(fit_loop)

    @property
    def optimizer_steps(self) -> int:
        return self.optimizer.step.total.completed

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


class AutomaticOptimizationView:
    """`trainer.fit_loop.epoch_loop.automatic_optimization`: its progress counters (the steps themselves are the
    fit loop's)."""

    def __init__(self, fit_loop: Any) -> None:
        self.optim_progress = OptimizationProgressView(fit_loop)


class ManualOptimizationView:
    """`trainer.fit_loop.epoch_loop.manual_optimization`: the steps `optimizer.step()` took in `training_step`."""

    def __init__(self, fit_loop: Any) -> None:
        self._fit_loop = fit_loop

    @property
    def optim_step_progress(self) -> StepProgress:
        return self._fit_loop.manual_step_progress


class TrainingEpochLoopView:
    """`trainer.fit_loop.epoch_loop`: the batches of a training epoch."""

    def __init__(self, fit_loop: Any) -> None:
        self._fit_loop = fit_loop
        self.val_loop = FitValidationLoopView(fit_loop)
        self.automatic_optimization = AutomaticOptimizationView(fit_loop)
        self.manual_optimization = ManualOptimizationView(fit_loop)

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

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        self._fit_loop.trainer.max_steps = value

    @property
    def min_steps(self) -> int | None:
        return self._fit_loop.trainer.min_steps

    @min_steps.setter
    def min_steps(self, value: int | None) -> None:
        self._fit_loop.trainer.min_steps = value

    @property
    def _batches_that_stepped(self) -> int:
        return self._fit_loop.batches_that_stepped
