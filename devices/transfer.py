"""Moving a batch (tensors nested in any usual Python structure) onto a device."""

from __future__ import annotations

import copy
import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


def move_to_device(data: Any, device: torch.device | str | int) -> Any:
    """Return `data` with every tensor (and every object with a `.to` method) moved to `device`.

    Lists, tuples, namedtuples, mappings and dataclass instances are rebuilt with the same type, so
    the caller's containers are not modified (what an object's own `.to` does is up to it).
    Anything else is returned as it is.
    """
    target = device if isinstance(device, torch.device) else torch.device(device)
    if _already_there(data, target):
        return data
    # Copies host -> GPU can overlap with compute; copies to the host must finish before Python reads them.
    return _move(data, target, non_blocking=target.type == "cuda")


def _already_there(data: Any, device: torch.device) -> bool:
    """The per-batch fast path: a tensor, or a flat tuple/list of tensors, already on `device`."""
    kind = type(data)
    if kind is Tensor:
        return data.device == device
    if kind is tuple or kind is list:
        return all(type(item) is Tensor and item.device == device for item in data)
    return False


def _move(data: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(data, Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, (str, bytes)):
        return data  # sequences of themselves: recursing would never end
    to = None if isinstance(data, type) else getattr(data, "to", None)
    if callable(to):
        # The object knows best how to move itself (e.g. a tokenizer's BatchEncoding).
        return to(device)
    if isinstance(data, Mapping):
        items = [(key, _move(value, device, non_blocking)) for key, value in data.items()]
        if isinstance(data, defaultdict):
            return type(data)(data.default_factory, items)
        return _rebuild(data, items)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return _rebuild(data, [_move(item, device, non_blocking) for item in data], unpack=True)
    if isinstance(data, (list, tuple)):
        return _rebuild(data, [_move(item, device, non_blocking) for item in data])
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        moved = copy.copy(data)
        for field in dataclasses.fields(data):
            # object.__setattr__ also works for frozen dataclasses; the copy is ours to change.
            object.__setattr__(moved, field.name, _move(getattr(data, field.name), device, non_blocking))
        return moved
    return data


def _rebuild(original: Any, items: list[Any], unpack: bool = False) -> Any:
    kind = type(original)
    try:
        return kind(*items) if unpack else kind(items)
    except TypeError as error:
        raise TypeError(
            f"cannot rebuild a batch element of type {kind.__qualname__} after moving its tensors: its "
            "constructor does not take its items; give it a .to(device) method or override "
            "transfer_batch_to_device"
        ) from error


def move_optimizer_state(optimizer: Optimizer, device: torch.device | str | int) -> None:
    """Move an optimizer's state tensors (moments, buffers) in place to `device`.

    The "step" counter stays where it is unless the group is capturable or fused, the rule
    torch.optim applies itself: the plain kernels read it on the host, and moving it would add a
    device sync per step.
    """
    target = torch.device(device)
    non_blocking = target.type == "cuda"
    for group in optimizer.param_groups:
        step_follows = bool(group.get("capturable") or group.get("fused"))
        for param in group["params"]:
            state = optimizer.state.get(param)
            if not state:
                continue
            for key, value in state.items():
                if key != "step" or step_follows:
                    state[key] = _move(value, target, non_blocking)
