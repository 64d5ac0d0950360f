"""Hyperparameter helpers for `save_hyperparameters`."""

from __future__ import annotations

import copy
import inspect
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


def collect_init_args(frame: FrameType) -> dict[str, Any]:
    """The arguments of the `__init__` running in `frame`, `**kwargs` flattened in, `self` and `*args` left out."""
    info = inspect.getargvalues(frame)
    params: dict[str, Any] = {}
    for name in info.args:
        if name not in ("self", "__class__"):
            params[name] = info.locals[name]
    if info.keywords:
        params.update(info.locals.get(info.keywords, {}))
    return params


class HyperparametersMixin:
    """`save_hyperparameters` and `hparams`, shared by LightningModule and LightningDataModule."""

    def _init_hparams(self) -> None:
        self._hparams = AttributeDict()
        self._hparams_initial = AttributeDict()
        self._log_hyperparams = True

    def save_hyperparameters(
        self, *args: Any, ignore: str | list[str] | None = None, logger: bool = True, frame: Any = None
    ) -> None:
        """Store the caller's `__init__` arguments (or the named ones, or one given mapping) in `self.hparams`."""
        self._log_hyperparams = logger
        ignored = [ignore] if isinstance(ignore, str) else list(ignore or [])
        if len(args) == 1 and isinstance(args[0], Mapping):
            params = dict(args[0])
        else:
            init_args = collect_init_args(frame or inspect.currentframe().f_back)
            names = [a for a in args if isinstance(a, str)]
            params = {k: v for k, v in init_args.items() if not names or k in names}
        self._hparams = AttributeDict({k: v for k, v in params.items() if k not in ignored})
        self._hparams_initial = copy.deepcopy(self._hparams)

    @property
    def hparams(self) -> AttributeDict:
        return self._hparams

    @property
    def hparams_initial(self) -> AttributeDict:
        return self._hparams_initial
