"""Lightning's state enums, with its case-insensitive string semantics, and the derived TrainerState."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class _LowerStrEnum(str, Enum):
    """A str enum that compares case-insensitively with strings and other enums, by value."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Enum):
            other = other.value
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.value.lower())

    def __str__(self) -> str:
        return self.value


class TrainerStatus(_LowerStrEnum):
    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(_LowerStrEnum):
    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(_LowerStrEnum):
    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str:
        if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING):
            return "val"
        return self.value


@dataclass(frozen=True)
class TrainerState:
    """A read-only snapshot of (status, fn, stage); the trainer derives it from the machine's state."""

    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped
