"""Calling hooks: callbacks, LightningModule, DataModule, in Lightning's owner order.

Which hooks a callback or the module really has is decided once per run and per instance (a hook assigned on
the instance counts, one set to None is switched off), so a per-batch hook costs one dict lookup plus the calls
that actually do something.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from stages.callbacks.callback import Callback, Checkpoint
from stages.callbacks.early_stopping import EarlyStopping
from stages.module import NO_OP_HOOKS, LightningModule

if TYPE_CHECKING:
    from stages.contract import TrainerView

# The step methods Lightning calls without `batch_idx` when their signature has no room for it.
STEP_METHODS = frozenset({"training_step", "validation_step", "test_step", "predict_step"})

# How `HookRunner.module` calls a hook, decided once per run.
_SKIP = 0  # no-op default, or switched off with None
_DEFAULT = 1  # Lightning's own default with a body: no hook-name bookkeeping (they never call self.log)
_USER = 2  # the user's implementation
_USER_WITHOUT_BATCH_IDX = 3  # the user's step method, which takes no `batch_idx`


def is_overridden(name: str, instance: object, parent: type) -> bool:
    """True when `instance` has its own `name`: assigned on the instance (not None), or defined differently from
    `parent` in its class. `model.validation_step = None` therefore counts as not implemented, as in Lightning."""
    own = getattr(instance, "__dict__", {})
    if name in own:
        return own[name] is not None
    attribute = getattr(type(instance), name, None)
    return attribute is not None and attribute is not getattr(parent, name, None)


def overridden_steps(module: LightningModule) -> tuple[str, ...]:
    """The step methods the module implements."""
    return tuple(name for name in sorted(STEP_METHODS) if is_overridden(name, module, LightningModule))


def takes_batch_idx(step: Any) -> bool:
    """Whether a step method is called with `batch_idx`: it names it, takes `*args`, or has two positional slots."""
    try:
        parameters = inspect.signature(step).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin or C callable without a signature: pass everything, as documented
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.name == "dataloader_iter" for p in positional):
        return False  # a step that fetches its own batches is called with the iterator alone
    return (
        any(p.kind is p.VAR_POSITIONAL for p in parameters)
        or any(p.name == "batch_idx" for p in positional)
        or len(positional) >= 2
    )


def check_takes_dataloader_idx(module: Any, step: str, loader_hook: str, num_loaders: int) -> None:
    """Several loaders pass `dataloader_idx` to the step: a step with no room for it is refused before it runs."""
    if num_loaders < 2:
        return
    try:
        parameters = inspect.signature(getattr(module, step)).parameters.values()
    except (TypeError, ValueError):
        return  # no signature to read: the call itself will tell
    if any(p.name == "dataloader_idx" or p.kind is p.VAR_POSITIONAL for p in parameters):
        return
    raise RuntimeError(
        f"You provided multiple `{loader_hook}`, but no `dataloader_idx` argument in "
        f"`{type(module).__name__}.{step}()`. Try adding `dataloader_idx=0` to its signature."
    )


def is_monitoring(callback: Callback) -> bool:
    """Monitoring callbacks run after the module in `on_train_epoch_end`."""
    return isinstance(callback, Checkpoint | EarlyStopping)


class HookRunner:
    calls_idle_hooks = False  # a callback's idle hooks (see `Callback._idle_hooks`) are not called

    def __init__(self, trainer: TrainerView):
        self.trainer = trainer
        self._overriding: dict[str, list[Callback]] = {}
        self._module_plans: dict[str, int] = {}
        self._module_overrides: dict[str | tuple[str, ...], bool] = {}
        self._module: Any = None

    def reset(self) -> None:
        """Forget what was decided: the callback list or the module changed, or a new run starts."""
        self._overriding = {}
        self._module_plans = {}
        self._module_overrides = {}
        self._module = self.trainer.lightning_module

    def _module_overrides_hook(self, name: str, module: Any) -> bool:
        found = self._module_overrides.get(name)
        if found is None:
            found = is_overridden(name, module, LightningModule)
            self._module_overrides[name] = found
        return found

    def _plan(self, name: str) -> int:
        module = self._module
        if not callable(getattr(module, name, None)):
            plan = _SKIP
        elif self._module_overrides_hook(name, module):
            plan = _USER
            if name in STEP_METHODS and not takes_batch_idx(getattr(module, name)):
                plan = _USER_WITHOUT_BATCH_IDX
        else:
            plan = _SKIP if name in NO_OP_HOOKS else _DEFAULT
        self._module_plans[name] = plan
        return plan

    def all_default(self, names: tuple[str, ...]) -> bool:
        """No callback implements any of `names`, and the module runs Lightning's own default for each (decided
        once per run: a loop may then take the short way these defaults amount to)."""
        plans = self._module_plans
        return not any(
            self._callbacks_for(name) or (plans[name] if name in plans else self._plan(name)) not in (_SKIP, _DEFAULT)
            for name in names
        )

    def _callbacks_for(self, name: str) -> list[Callback]:
        found = self._overriding.get(name)
        if found is None:
            # A hook assigned on the instance (LambdaCallback's way) counts; one set to None there switches it off;
            # one the callback says is idle as configured is left out, unless every call is timed.
            found = [
                cb
                for cb in self.trainer.callbacks
                if is_overridden(name, cb, Callback) and (self.calls_idle_hooks or name not in cb._idle_hooks())
            ]
            self._overriding[name] = found
        return found

    def callbacks(self, name: str, *args: Any, **kwargs: Any) -> None:
        callbacks = self._overriding.get(name)
        if callbacks is None:
            callbacks = self._callbacks_for(name)
        if callbacks:
            self._call_callbacks(name, callbacks, args, kwargs)

    def callbacks_each(self, name: str, *args: Any) -> list[tuple[Callback, BaseException]]:
        """Call `name` on every callback even when some raise (the interrupt path must reach them all); return
        the failures, in order."""
        failures = []
        for callback in self._callbacks_for(name):
            try:
                self._call_callbacks(name, [callback], args, {})
            except BaseException as error:
                failures.append((callback, error))
        return failures

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
        plan = self._module_plans.get(name)
        if plan is None:
            plan = self._plan(name)
        if plan == _SKIP:
            return None
        if plan == _DEFAULT:
            return getattr(module, name)(*args, **kwargs)
        if plan == _USER_WITHOUT_BATCH_IDX:
            args = args[:1] + args[2:]
        state = module.__dict__
        previous = state["_current_fx_name"]
        state["_current_fx_name"] = name
        try:
            return getattr(module, name)(*args, **kwargs)
        finally:
            state["_current_fx_name"] = previous

    def step_method(self, name: str) -> Callable[[Any, int], Any]:
        """The user's step method `name` as `(batch, batch_idx)`, resolved once for a loop that calls it every
        batch, without the hook-name bookkeeping: the loop runs its batches inside `naming(name)`."""
        plan = self._module_plans.get(name)
        if plan is None:
            plan = self._plan(name)
        assert plan in (_USER, _USER_WITHOUT_BATCH_IDX), f"{name} is the user's step method"
        method = getattr(self._module, name)
        if plan == _USER:
            return cast(Callable[[Any, int], Any], method)
        return lambda batch, batch_idx: method(batch)

    @contextmanager
    def naming(self, name: str | None) -> Iterator[None]:
        """`self.log` calls in the block log as hook `name`; None leaves the name to each hook call. Hook calls in
        the block name themselves and give `name` back."""
        if name is None:
            yield
            return
        state = self._module.__dict__
        previous = state["_current_fx_name"]
        state["_current_fx_name"] = name
        try:
            yield
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
        hook = getattr(self.trainer.datamodule, name, None)
        # No DataModule, or a hook switched off with None.
        return hook(*args, **kwargs) if callable(hook) else None
