"""Moving a batch (tensors nested in any usual Python structure) onto a device, or casting its floats; copying a
tensor's values back to the host without waiting for the device."""

from __future__ import annotations

import copy
import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


def copy_to_host(tensor: Tensor) -> Callable[[], list[Any]]:
    """Start copying `tensor`'s values to the host: the call returned gives them as a list. On a device it waits
    for that copy alone, which is queued behind the work that made the tensor, not behind what was queued after it;
    on the host the values are read at once."""
    if tensor.is_cpu:
        values = tensor.tolist()
        return lambda: values
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    copied = torch.Event(device=tensor.device)
    copied.record()

    def read() -> list[Any]:
        copied.synchronize()
        return host.tolist()

    return read


def move_to_device(data: Any, device: torch.device | str | int) -> Any:
    """Return `data` with every tensor (and every object with a `.to` method) moved to `device`.

    Lists, tuples, namedtuples, mappings and dataclass instances are rebuilt with the same type, so
    the caller's containers are not modified (what an object's own `.to` does is up to it).
    Anything else is returned as it is.
    """
    return mover_to(device)(data)


def mover_to(device: torch.device | str | int) -> Callable[[Any], Any]:
    """`move_to_device` for one device, for a loop that moves every batch: its fast path (a tensor, or a flat
    tuple/list of tensors, already there) is written for the device once. On the host it asks `is_cpu`, which
    builds no device object."""
    target = device if isinstance(device, torch.device) else torch.device(device)
    # Copies host -> GPU can overlap with compute; copies to the host must finish before Python reads them.
    non_blocking, host = target.type == "cuda", target.type == "cpu"

    def move(data: Any) -> Any:
        kind = type(data)
        if kind is Tensor:
            if data.is_cpu if host else data.device == target:
                return data
        elif kind is tuple or kind is list:
            for item in data:
                if type(item) is not Tensor or not (item.is_cpu if host else item.device == target):
                    break
            else:
                return data
        return _move(data, target, non_blocking)

    return move


def convert_floating(data: Any, dtype: torch.dtype) -> Any:
    """Return `data` with every floating-point tensor cast to `dtype`; integer and bool tensors stay as they are.

    Containers are rebuilt as in `move_to_device`; other objects, even those with a `.to` method, are left alone.
    """
    if _already_converted(data, dtype):
        return data
    return _walk(data, lambda tensor: tensor.to(dtype) if tensor.is_floating_point() else tensor, None)


def _already_converted(data: Any, dtype: torch.dtype) -> bool:
    """The per-batch fast path: a tensor, or a flat tuple/list of tensors, that needs no cast."""
    kind = type(data)
    if kind is Tensor:
        return data.dtype == dtype or not data.is_floating_point()
    if kind is tuple or kind is list:
        return all(type(item) is Tensor and (item.dtype == dtype or not item.is_floating_point()) for item in data)
    return False


def _move(data: Any, device: torch.device, non_blocking: bool) -> Any:
    # The object knows best how to move itself (e.g. a tokenizer's BatchEncoding).
    return _walk(data, lambda tensor: tensor.to(device, non_blocking=non_blocking), lambda obj: obj.to(device))


def map_leaves(data: Any, leaf_types: tuple[type, ...], function: Callable[[Any], Any]) -> Any:
    """`data` with `function` applied to every instance of `leaf_types` in it, its containers rebuilt as
    `move_to_device` rebuilds a batch's (lists, tuples, namedtuples, mappings, defaultdicts, dataclasses)."""
    return _walk(data, function, None, leaf_types)


def _walk(
    data: Any,
    on_tensor: Callable[[Any], Any],
    on_movable: Callable[[Any], Any] | None,
    leaf_types: tuple[type, ...] = (Tensor,),
) -> Any:
    """Apply `on_tensor` to every tensor (every `leaf_types` instance) in `data`, and `on_movable` (when given) to
    objects with a `.to`."""
    if isinstance(data, leaf_types):
        return on_tensor(data)
    if isinstance(data, (str, bytes)):
        return data  # sequences of themselves: recursing would never end
    if on_movable is not None and not isinstance(data, type) and callable(getattr(data, "to", None)):
        return on_movable(data)

    def walk(item: Any) -> Any:
        return _walk(item, on_tensor, on_movable, leaf_types)

    if isinstance(data, Mapping):
        items = [(key, walk(value)) for key, value in data.items()]
        if isinstance(data, defaultdict):
            return type(data)(data.default_factory, items)
        return _rebuild(data, items)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return _rebuild(data, [walk(item) for item in data], unpack=True)
    if isinstance(data, (list, tuple)):
        return _rebuild(data, [walk(item) for item in data])
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        walked = copy.copy(data)
        for field in dataclasses.fields(data):
            # object.__setattr__ also works for frozen dataclasses; the copy is ours to change.
            object.__setattr__(walked, field.name, walk(getattr(data, field.name)))
        return walked
    return data


def _rebuild(original: Any, items: list[Any], unpack: bool = False) -> Any:
    kind = type(original)
    try:
        return kind(*items) if unpack else kind(items)
    except TypeError as error:
        raise TypeError(
            f"cannot rebuild a batch element of type {kind.__qualname__} after moving or casting its tensors: its "
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
