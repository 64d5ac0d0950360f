"""Flags the ranks agree on, carried by DDP's gradient all-reduce instead of a collective of their own."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

# How many flags one backward can carry: the carrier's size, fixed when DDP is built.
SLOTS = 8


class _CopyToHost:
    """The carrier's gradient copied to host memory without waiting: `read` waits for that copy alone (queued
    after the backward that made the gradient), not for the batches queued on the device since. On the host the
    copy is done when `start` returns."""

    def __init__(self, device: torch.device) -> None:
        on_device = device.type != "cpu"
        self.buffer = torch.empty(SLOTS, pin_memory=on_device)
        self.copied = torch.Event(device=device) if on_device else None
        self.count = 0

    def start(self, gradient: Tensor, count: int) -> None:
        self.buffer.copy_(gradient, non_blocking=True)
        self.count = count
        if self.copied is not None:
            self.copied.record()

    def read(self) -> list[bool]:
        if self.copied is not None:
            self.copied.synchronize()
        return [value != 0 for value in self.buffer.tolist()[: self.count]]


class FlagsRideGradients:
    """A parameter of the flags' own beside the model's, in what DDP wraps: backward runs on the loss plus
    `carrier · flags`, a term whose value nothing reads and whose gradient for the carrier is the flags. DDP's
    built-in all-reduce averages that gradient with the model's, so after backward each flag is nonzero where any
    rank raised it: no collective and no Python of their own in backward, for any model size.

    `read_behind`: each `alight` returns the flags the backward before carried and only starts copying this one's
    to the host, so that no batch waits for the device to read them (on a GPU, reading them at once would)."""

    def __init__(self, device: torch.device, read_behind: bool) -> None:
        self.carrier = nn.Parameter(torch.zeros(SLOTS, device=device))
        self.device = device
        self._behind = _CopyToHost(device) if read_behind else None
        self._pending = False  # whether a carried set is on its way to the host, not yet returned
        # Each set of flags as a tensor, made once: a batch builds none (they are never written to).
        self._tensors: dict[tuple[bool, ...], Tensor] = {}
        # DDP all-reduces every parameter in each backward: one without boarded flags carries zeros.
        self._no_flags = self._tensor_of(())
        self.boarded: Tensor | None = None
        self.count = 0  # how many flags are boarded
        self.carried = 0  # how many flags the backwards since the last `alight` carried

    def _tensor_of(self, flags: Sequence[bool]) -> Tensor:
        key = tuple(flags)
        tensor = self._tensors.get(key)
        if tensor is None:
            padded = [*key, *[False] * (SLOTS - len(key))]
            tensor = self._tensors[key] = torch.tensor(padded, dtype=torch.float32, device=self.device)
        return tensor

    def board(self, flags: Sequence[bool]) -> None:
        self.boarded, self.count = self._tensor_of(flags), len(flags)

    def carry(self, loss: Tensor) -> Tensor:
        """What backward runs on: `loss` plus the term that carries the boarded flags (zeros when none are)."""
        flags = self.boarded
        if flags is None:
            return loss + torch.dot(self.carrier, self._no_flags)
        self.boarded, self.carried = None, self.count
        return loss + torch.dot(self.carrier, flags)

    def alight(self) -> list[bool] | None:
        """The boarded flags, agreed (reading behind: the ones carried the time before, all False the first
        time); None when no backward carried them. Either way they leave. A raised flag is zeroed in the carrier's
        gradient for the next backward (no optimizer of the user's does it)."""
        carried, self.carried, self.boarded = self.carried, 0, None
        gradient = self.carrier.grad
        if not carried or gradient is None:
            return None
        behind = self._behind
        if behind is None:
            agreed = [value != 0 for value in gradient.tolist()]
            if any(agreed):
                gradient.zero_()
            return agreed[:carried]
        previous = behind.read() if self._pending else [False] * carried
        behind.start(gradient, carried)
        gradient.zero_()  # queued after the copy: whether a flag was raised is not known yet
        self._pending = True
        return previous

    def drain(self) -> list[bool] | None:
        """Reading behind: the carried flags `alight` has not returned yet (None when there are none); they
        leave."""
        if not self._pending:
            return None
        self._pending = False
        assert self._behind is not None, "only a carrier reading behind has flags pending"
        return self._behind.read()
