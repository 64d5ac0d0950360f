"""Profiling the trainer's actions: a hook runner that times each hook call, chosen once per trainer.

Without a profiler the trainer keeps the plain `HookRunner`, so turning profiling off costs nothing per batch.
Action names follow Lightning's: `[Callback]{state_key}.{hook}`, `[LightningModule]{Class}.{hook}`,
`[LightningDataModule]{Class}.{hook}`.
"""

from __future__ import annotations

from typing import Any

from stages.callbacks.callback import Callback
from stages.hooks import HookRunner
from statemachine.profilers.base import PassThroughProfiler, Profiler


class ProfiledHookRunner(HookRunner):
    calls_idle_hooks = True  # the report lists every hook Lightning's lists, idle ones with their (tiny) times

    def __init__(self, trainer: Any, profiler: Profiler) -> None:
        super().__init__(trainer)
        self.profiler = profiler
        self._callback_actions: dict[tuple[int, str], str] = {}
        self._module_actions: dict[str, str] = {}

    def reset(self) -> None:
        super().reset()
        self._callback_actions = {}
        self._module_actions = {}

    def _call_callbacks(self, name: str, callbacks: list[Callback], args: tuple, kwargs: dict[str, Any]) -> None:
        profiler = self.profiler
        for callback in callbacks:
            key = (id(callback), name)
            action = self._callback_actions.get(key)
            if action is None:
                action = self._callback_actions[key] = f"[Callback]{callback.state_key}.{name}"
            profiler.start(action)
            try:
                super()._call_callbacks(name, [callback], args, kwargs)
            finally:
                profiler.stop(action)

    def module(self, name: str, *args: Any, **kwargs: Any) -> Any:
        action = self._module_actions.get(name)
        if action is None:
            action = self._module_actions[name] = f"[LightningModule]{type(self._module).__name__}.{name}"
        self.profiler.start(action)
        try:
            return super().module(name, *args, **kwargs)
        finally:
            self.profiler.stop(action)

    def datamodule(self, name: str, *args: Any, **kwargs: Any) -> Any:
        datamodule = self.trainer.datamodule
        if datamodule is None:
            return None
        with self.profiler.profile(f"[LightningDataModule]{type(datamodule).__name__}.{name}"):
            return super().datamodule(name, *args, **kwargs)


def hook_runner(trainer: Any, profiler: Profiler) -> HookRunner:
    """The plain runner when nothing is profiled; the timing one otherwise."""
    if isinstance(profiler, PassThroughProfiler):
        return HookRunner(trainer)
    return ProfiledHookRunner(trainer, profiler)


def active_profiler(profiler: Profiler) -> Profiler | None:
    """The profiler the loops time dataloader `next` with; None when profiling is off."""
    return None if isinstance(profiler, PassThroughProfiler) else profiler
