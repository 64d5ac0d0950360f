"""`lightning.pytorch.utilities.apply_func` (Lightning re-exports it from its fabric package)."""

from __future__ import annotations

from typing import Any

import torch

from devices.transfer import move_to_device

__all__ = ["move_data_to_device"]


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """`batch` with every tensor in it (nested in lists, tuples, dicts, dataclasses) moved to `device`."""
    return move_to_device(batch, device)
