"""Where a tuned value lives: on the module, in its `hparams`, on the DataModule, or in the DataModule's `hparams`.

Reading takes the last of these places that has the name; writing sets every place that has it, so a batch size
kept both on the module and in the DataModule's hyperparameters stays one value.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


def _holders(model: Any, name: str) -> list[Any]:
    holders: list[Any] = []
    trainer = getattr(model, "_trainer", None)
    datamodule = None if trainer is None else trainer.datamodule
    for owner in (model, datamodule):
        if owner is None:
            continue
        if hasattr(owner, name):
            holders.append(owner)
        hparams = getattr(owner, "hparams", None)
        if hparams is not None and _has_key(hparams, name):
            holders.append(hparams)
    return holders


def _has_key(hparams: Any, name: str) -> bool:
    return name in hparams if isinstance(hparams, MutableMapping) else hasattr(hparams, name)


def lightning_hasattr(model: Any, name: str) -> bool:
    """Whether `name` is on the module, its hparams, the DataModule or the DataModule's hparams."""
    return bool(_holders(model, name))


def lightning_getattr(model: Any, name: str) -> Any:
    holders = _holders(model, name)
    if not holders:
        raise AttributeError(_missing(name))
    holder = holders[-1]
    return holder[name] if isinstance(holder, MutableMapping) else getattr(holder, name)


def lightning_setattr(model: Any, name: str, value: Any) -> None:
    holders = _holders(model, name)
    if not holders:
        raise AttributeError(_missing(name))
    for holder in holders:
        if isinstance(holder, MutableMapping):
            holder[name] = value
        else:
            setattr(holder, name, value)


def _missing(name: str) -> str:
    return f"{name!r} is neither an attribute of the model, nor in its hparams, nor on the datamodule or its hparams"
