"""`lightning.pytorch.utilities.model_helpers`."""

from __future__ import annotations

from stages import hooks
from stages.callbacks.callback import Callback
from stages.datamodule import LightningDataModule
from stages.module import LightningModule

__all__ = ["is_overridden"]

_BASES = (LightningModule, LightningDataModule, Callback)


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether `instance`'s class defines `method_name` differently from `parent` (by default the Lightning base
    class it derives from)."""
    if instance is None:
        return False
    if parent is None:
        parent = next((base for base in _BASES if isinstance(instance, base)), None)
        if parent is None:
            raise ValueError(f"is_overridden needs parent= for a {type(instance).__name__}, not a Lightning class")
    return hooks.is_overridden(method_name, instance, parent)
