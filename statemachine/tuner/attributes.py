"""Where a tuned value lives: on the module, in its `hparams`, on the DataModule, or in the DataModule's `hparams`.

Reading takes the last of these places that has the name; writing sets every place that has it, so a batch size
kept both on the module and in the DataModule's hyperparameters stays one value.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

LR_ATTRIBUTES = ("lr", "learning_rate")


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


def lr_attribute(model: Any, attr_name: str) -> str:
    """The name the found rate is written to: `attr_name`, else the first of `lr`, `learning_rate` present."""
    if attr_name:
        if not lightning_hasattr(model, attr_name):
            raise AttributeError(
                f"The attribute name for the learning rate was set to {attr_name!r}, but it is neither on the "
                "model nor in its hparams (nor on the datamodule)"
            )
        return attr_name
    found = next((name for name in LR_ATTRIBUTES if lightning_hasattr(model, name)), None)
    if found is None:
        raise AttributeError(
            f"When using the learning rate finder, the model or model.hparams needs one of {LR_ATTRIBUTES}; "
            "for another name, set it with lr_find(attr_name=...) or update_attr=False"
        )
    return found
