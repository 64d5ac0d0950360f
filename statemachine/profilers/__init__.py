"""Profilers: `Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler instance)`.

The pytorch profiler's module imports `torch.profiler` only when it is used.
"""

from __future__ import annotations

from typing import Any

from statemachine.profilers.advanced import AdvancedProfiler
from statemachine.profilers.base import PassThroughProfiler, Profiler
from statemachine.profilers.simple import SimpleProfiler

PROFILERS = ("simple", "advanced", "pytorch")

__all__ = ["PROFILERS", "AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"]


def __getattr__(name: str) -> Any:
    if name == "PyTorchProfiler":
        from statemachine.profilers.pytorch import PyTorchProfiler

        return PyTorchProfiler
    raise AttributeError(f"module 'statemachine.profilers' has no attribute {name!r}")


def resolve(profiler: Profiler | str | None) -> Profiler:
    """`Trainer(profiler=...)`: None, one of PROFILERS (any case) or a Profiler; checked before by the config."""
    if profiler is None:
        return PassThroughProfiler()
    if isinstance(profiler, Profiler):
        return profiler
    name = profiler.lower()
    if name == "simple":
        return SimpleProfiler()
    if name == "advanced":
        return AdvancedProfiler()
    from statemachine.profilers.pytorch import PyTorchProfiler

    return PyTorchProfiler()
