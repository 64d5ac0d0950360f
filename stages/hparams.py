"""Hyperparameter helpers for `save_hyperparameters`."""

from __future__ import annotations

import argparse
import copy
import inspect
import pickle
from collections.abc import Mapping
from types import FrameType
from typing import Any


class AttributeDict(dict):
    """A dict whose keys are also attributes: `hparams.lr` and `hparams["lr"]`."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as missing:
            raise AttributeError(f"no hyperparameter named {key!r}") from missing

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


def collect_init_args(frame: FrameType, owner: object) -> dict[str, Any]:
    """The `__init__` arguments of `owner`, from `frame` outwards: when a parent class's `__init__` saves the
    hyperparameters, the subclass `__init__` that called it through super() contributes its arguments too, and
    the subclass's value wins for a name both take. A frame that is not such an `__init__` gives its own
    arguments only."""
    frames: list[FrameType] = []
    current: FrameType | None = frame
    while current is not None and _is_init_of(current, owner):
        frames.append(current)
        current = current.f_back
    params: dict[str, Any] = {}
    for init_frame in frames or [frame]:
        params.update(_frame_args(init_frame, owner))
    return params


def get_init_args(frame: FrameType) -> dict[str, Any]:
    """The arguments of the method running in `frame` (`self` and `*args` left out, `**kwargs` merged in), as
    `save_hyperparameters` collects them; empty unless it is a method that uses `super()` (a class's
    `__init__` calling its parent's)."""
    if "__class__" not in frame.f_code.co_freevars:
        return {}
    info = inspect.getargvalues(frame)
    owner = info.locals.get(info.args[0]) if info.args else None
    return _frame_args(frame, owner)


def is_picklable(obj: object) -> bool:
    """Whether `obj` survives `pickle.dumps` (what a checkpoint's hyperparameters and a spawned rank need)."""
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RecursionError, TypeError):
        return False
    return True


def _is_init_of(frame: FrameType, owner: object) -> bool:
    """An `__init__` running on `owner` that uses super() (so it has the `__class__` cell)."""
    if frame.f_code.co_name != "__init__" or "__class__" not in frame.f_code.co_freevars:
        return False
    info = inspect.getargvalues(frame)
    return bool(info.args) and info.locals.get(info.args[0]) is owner


def _frame_args(frame: FrameType, owner: object) -> dict[str, Any]:
    """The arguments of the function running in `frame`, `**kwargs` flattened in, `self` and `*args` left out."""
    info = inspect.getargvalues(frame)
    params: dict[str, Any] = {}
    for name in info.args:
        value = info.locals[name]
        if name not in ("self", "__class__") and value is not owner:
            params[name] = value
    if info.keywords:
        params.update(info.locals.get(info.keywords, {}))
    return params


class HyperparametersMixin:
    """`save_hyperparameters` and `hparams`, shared by LightningModule and LightningDataModule."""

    def _init_hparams(self) -> None:
        self._hparams = AttributeDict()
        self._hparams_initial = AttributeDict()
        self._hparams_name: str | None = None
        self._log_hyperparams = True

    def save_hyperparameters(
        self, *args: Any, ignore: str | list[str] | None = None, logger: bool = True, frame: Any = None
    ) -> None:
        """Store the caller's `__init__` arguments (or the named ones, or one given mapping) in `self.hparams`.

        Called again (by a subclass after its parent did), the new values are added to the saved ones.
        """
        self._log_hyperparams = logger
        ignored = [ignore] if isinstance(ignore, str) else list(ignore or [])
        here = inspect.currentframe()
        caller = frame or (here.f_back if here is not None else None)
        if caller is None:
            raise RuntimeError("save_hyperparameters cannot see its caller's frame on this Python implementation")
        init_args = collect_init_args(caller, self)
        if len(args) == 1 and isinstance(args[0], Mapping | argparse.Namespace):
            given = args[0]
            params = dict(vars(given) if isinstance(given, argparse.Namespace) else given)
            # the argument the mapping came in as, so load_from_checkpoint can pass it back the same way
            self._hparams_name = next((name for name, value in init_args.items() if value is given), None)
        else:
            names = [a for a in args if isinstance(a, str)]
            missing = [name for name in names if name not in init_args]
            if missing:
                raise ValueError(f"save_hyperparameters{tuple(names)}: {missing} are not arguments of __init__")
            params = {k: v for k, v in init_args.items() if not names or k in names}
            self._hparams_name = "kwargs" if params else None
        self._hparams.update({k: v for k, v in params.items() if k not in ignored})
        self._hparams_initial = copy.deepcopy(self._hparams)

    @property
    def hparams(self) -> AttributeDict:
        return self._hparams

    @property
    def hparams_initial(self) -> AttributeDict:
        return self._hparams_initial
