"""Calling hooks: callbacks, LightningModule, DataModule, in Lightning's owner order.

Which callbacks override which hook is computed once per run, so a per-batch hook costs one dict lookup plus
the calls that actually do something.
"""

from __future__ import annotations

from typing import Any

from stages.callbacks.callback import Callback, Checkpoint
from stages.callbacks.early_stopping import EarlyStopping
from stages.module import NO_OP_HOOKS, LightningModule


def is_overridden(name: str, instance: object, parent: type) -> bool:
    """True when `instance`'s class defines `name` differently from `parent`."""
    attribute = getattr(type(instance), name, None)
    return attribute is not None and attribute is not getattr(parent, name, None)


def callback_has_hook(name: str, callback: Callback) -> bool:
    """A hook assigned on the instance (LambdaCallback's way) counts, and one set to None there switches it off."""
    assigned = getattr(callback, "__dict__", {})
    if name in assigned:
        return assigned[name] is not None
    return is_overridden(name, callback, Callback)


def is_monitoring(callback: Callback) -> bool:
    """Monitoring callbacks run after the module in `on_train_epoch_end` (reference 5.8)."""
    return isinstance(callback, Checkpoint | EarlyStopping)


class HookRunner:
    def __init__(self, trainer: Any):
        self.trainer = trainer
        self._overriding: dict[str, list[Callback]] = {}
        self._module_overrides: dict[str | tuple[str, ...], bool] = {}
        self._module: Any = None

    def reset(self) -> None:
        """Forget the override caches: the callback list or the module changed."""
        self._overriding = {}
        self._module_overrides = {}
        self._module = self.trainer.lightning_module

    def _module_overrides_hook(self, name: str, module: Any) -> bool:
        found = self._module_overrides.get(name)
        if found is None:
            found = is_overridden(name, module, LightningModule) or name in module.__dict__
            self._module_overrides[name] = found
        return found

    def _callbacks_for(self, name: str) -> list[Callback]:
        found = self._overriding.get(name)
        if found is None:
            found = [cb for cb in self.trainer.callbacks if callback_has_hook(name, cb)]
            self._overriding[name] = found
        return found

    def callbacks(self, name: str, *args: Any, **kwargs: Any) -> None:
        callbacks = self._overriding.get(name)
        if callbacks is None:
            callbacks = self._callbacks_for(name)
        if callbacks:
            self._call_callbacks(name, callbacks, args, kwargs)

    def callbacks_where(self, name: str, monitoring: bool, *args: Any) -> None:
        """Call `name` on the monitoring callbacks only, or on the others only."""
        chosen = [callback for callback in self._callbacks_for(name) if is_monitoring(callback) == monitoring]
        self._call_callbacks(name, chosen, args, {})

    def _call_callbacks(self, name: str, callbacks: list[Callback], args: tuple, kwargs: dict[str, Any]) -> None:
        trainer = self.trainer
        module = self._module
        # Written through __dict__: nn.Module.__setattr__ costs microseconds, and hooks run many times a batch.
        state = module.__dict__
        previous = state["_current_fx_name"]
        state["_current_fx_name"] = name
        try:
            for callback in callbacks:
                getattr(callback, name)(trainer, module, *args, **kwargs)
        finally:
            state["_current_fx_name"] = previous

    def module(self, name: str, *args: Any, **kwargs: Any) -> Any:
        module = self._module
        overridden = self._module_overrides.get(name)
        if overridden is None:
            overridden = self._module_overrides_hook(name, module)
        if not overridden:
            # Lightning's own defaults never call self.log, so they need no hook-name bookkeeping, and the
            # ones that do nothing are not called at all: this runs about fifteen times a batch.
            return None if name in NO_OP_HOOKS else getattr(module, name)(*args, **kwargs)
        state = module.__dict__
        previous = state["_current_fx_name"]
        state["_current_fx_name"] = name
        try:
            return getattr(module, name)(*args, **kwargs)
        finally:
            state["_current_fx_name"] = previous

    def module_overrides(self, name: str) -> bool:
        return self._module_overrides_hook(name, self._module)

    def module_overrides_any(self, names: tuple[str, ...]) -> bool:
        """Whether the module overrides any of `names`, cached under the tuple itself."""
        found = self._module_overrides.get(names)
        if found is None:
            found = any(self._module_overrides_hook(name, self._module) for name in names)
            self._module_overrides[names] = found
        return found

    def datamodule(self, name: str, *args: Any, **kwargs: Any) -> Any:
        datamodule = self.trainer.datamodule
        if datamodule is None:
            return None
        return getattr(datamodule, name)(*args, **kwargs)
