"""A logger that keeps what it is given, for tests of callbacks that log."""

from __future__ import annotations

from typing import Any

import statemachine as L


class MemoryLogger(L.Logger):
    def __init__(self) -> None:
        self.logged: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any) -> None:
        """Hyperparameters are not what these tests look at."""

    def series(self, name: str) -> list[tuple[int | None, float]]:
        """(step, value) of every logging call that carried `name`."""
        return [(step, metrics[name]) for step, metrics in self.logged if name in metrics]

    def names(self) -> set[str]:
        return {name for _, metrics in self.logged for name in metrics}
