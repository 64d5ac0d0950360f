"""Hyperparameter helpers for `save_hyperparameters`."""

from __future__ import annotations

import inspect
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
