"""Loop progress counters, in Lightning's checkpoint layout (reference 7.2).

Each counter pair has `total` (the whole run) and `current` (the epoch or run); a batch or epoch advances
ready -> started -> processed -> completed, so a checkpoint tells exactly where inside a step it was taken.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class _Counts:
    ready: int = 0
    started: int = 0
    processed: int = 0
    completed: int = 0

    def reset(self) -> None:
        self.ready = self.started = self.processed = self.completed = 0


@dataclass
class _ReadyCompleted:
    ready: int = 0
    completed: int = 0

    def reset(self) -> None:
        self.ready = self.completed = 0


@dataclass
class _ZeroGradCounts:
    ready: int = 0
    started: int = 0
    completed: int = 0

    def reset(self) -> None:
        self.ready = self.started = self.completed = 0


@dataclass
class Progress:
    """Four counters (ready, started, processed, completed) for the run and for the current epoch."""

    total: _Counts = field(default_factory=_Counts)
    current: _Counts = field(default_factory=_Counts)

    def increment_ready(self) -> None:
        self.total.ready += 1
        self.current.ready += 1

    def increment_started(self) -> None:
        self.total.started += 1
        self.current.started += 1

    def increment_processed(self) -> None:
        self.total.processed += 1
        self.current.processed += 1

    def increment_completed(self) -> None:
        self.total.completed += 1
        self.current.completed += 1

    def reset(self) -> None:
        self.total.reset()
        self.current.reset()

    def reset_current(self) -> None:
        self.current.reset()

    def state_dict(self) -> dict[str, Any]:
        return {"total": asdict(self.total), "current": asdict(self.current)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = _Counts(**state["total"])
        self.current = _Counts(**state["current"])


@dataclass
class BatchProgress(Progress):
    is_last_batch: bool = False

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "is_last_batch": self.is_last_batch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.is_last_batch = state.get("is_last_batch", False)


@dataclass
class StepProgress:
    """Two counters (ready, completed): scheduler steps and optimizer steps."""

    total: _ReadyCompleted = field(default_factory=_ReadyCompleted)
    current: _ReadyCompleted = field(default_factory=_ReadyCompleted)

    def increment_ready(self) -> None:
        self.total.ready += 1
        self.current.ready += 1

    def increment_completed(self) -> None:
        self.total.completed += 1
        self.current.completed += 1

    def reset(self) -> None:
        self.total.reset()
        self.current.reset()

    def state_dict(self) -> dict[str, Any]:
        return {"total": asdict(self.total), "current": asdict(self.current)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = _ReadyCompleted(**state["total"])
        self.current = _ReadyCompleted(**state["current"])


@dataclass
class ZeroGradProgress:
    total: _ZeroGradCounts = field(default_factory=_ZeroGradCounts)
    current: _ZeroGradCounts = field(default_factory=_ZeroGradCounts)

    def increment_ready(self) -> None:
        self.total.ready += 1
        self.current.ready += 1

    def increment_started(self) -> None:
        self.total.started += 1
        self.current.started += 1

    def increment_completed(self) -> None:
        self.total.completed += 1
        self.current.completed += 1

    def state_dict(self) -> dict[str, Any]:
        return {"total": asdict(self.total), "current": asdict(self.current)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = _ZeroGradCounts(**state["total"])
        self.current = _ZeroGradCounts(**state["current"])
