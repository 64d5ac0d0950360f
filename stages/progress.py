"""Loop progress counters, in Lightning's checkpoint layout.

Each progress has `total` (the whole run) and `current` (the epoch or run) counters; a batch or epoch advances
ready -> started -> processed -> completed, so a checkpoint tells exactly where inside a step it was taken.
Optimizer and scheduler steps only count ready and completed; zero_grad counts ready, started, completed.
"""

from __future__ import annotations

from typing import Any

FOUR = ("ready", "started", "processed", "completed")
TWO = ("ready", "completed")
THREE = ("ready", "started", "completed")


class Counts:
    """Named integer counters, one per stage of a step (each instance has the ones it was made with)."""

    ready: int
    started: int
    processed: int
    completed: int

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        for name in names:
            setattr(self, name, 0)

    def reset(self) -> None:
        for name in self.names:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.names}

    def load(self, state: dict[str, int]) -> None:
        for name in self.names:
            setattr(self, name, state[name])


class Progress:
    """`total` and `current` counters; `increment_<stage>()` advances both."""

    def __init__(self, names: tuple[str, ...] = FOUR):
        self.total = Counts(names)
        self.current = Counts(names)

    # Direct attribute arithmetic, not getattr/setattr by name: these run several times per batch.
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
        return {"total": self.total.as_dict(), "current": self.current.as_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total.load(state["total"])
        self.current.load(state["current"])


class BatchProgress(Progress):
    """Batch counters, plus whether the last fetched batch was the loader's last."""

    def __init__(self) -> None:
        super().__init__(FOUR)
        self.is_last_batch = False

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "is_last_batch": self.is_last_batch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.is_last_batch = state.get("is_last_batch", False)

    def reset(self) -> None:
        """Every counter back to zero (after the sanity check): nothing fetched, so no last batch either."""
        super().reset()
        self.is_last_batch = False

    def reset_current(self) -> None:
        """A new run of the loop: no batch of it has been fetched, so none was the last."""
        super().reset_current()
        self.is_last_batch = False


class StepProgress(Progress):
    """Optimizer and scheduler steps: ready and completed."""

    def __init__(self) -> None:
        super().__init__(TWO)

    def increment_step(self) -> None:
        """Ready and completed together: both count a step once it is taken."""
        total, current = self.total, self.current
        total.ready += 1
        total.completed += 1
        current.ready += 1
        current.completed += 1


class ZeroGradProgress(Progress):
    """zero_grad calls: ready, started, completed."""

    def __init__(self) -> None:
        super().__init__(THREE)

    def increment_whole(self) -> None:
        """The three stages of a zero_grad with no hook around it (nothing can observe it halfway)."""
        total, current = self.total, self.current
        total.ready += 1
        total.started += 1
        total.completed += 1
        current.ready += 1
        current.started += 1
        current.completed += 1
