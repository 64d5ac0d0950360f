"""Flags the ranks agree on, carried by DDP's gradient all-reduce instead of a collective of their own."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from devices.transfer import copy_to_host

# How many flags one backward can carry: the carrier's size, fixed when DDP is built.
SLOTS = 8


class FlagsRideGradients:
    """A parameter of the flags' own beside the model's, in what DDP wraps: backward runs on the loss plus
    `carrier · flags`, a term whose value nothing reads and whose gradient for the carrier is the flags. DDP's
    built-in all-reduce averages that gradient with the model's, so after backward each flag is nonzero where any
    rank raised it: no collective and no Python of their own in backward, for any model size."""

    def __init__(self, device: torch.device) -> None:
        self.carrier = nn.Parameter(torch.zeros(SLOTS, device=device))
        self.device = device
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

    def alight(self) -> Callable[[], list[bool]] | None:
        """The call that reads the boarded flags, agreed (see `copy_to_host`); None when no backward carried them.
        Either way they leave. A raised flag is zeroed in the carrier's gradient for the next backward (no
        optimizer of the user's does it); on a device, where whether one was raised is not known without waiting
        for it, every time."""
        carried, self.carried, self.boarded = self.carried, 0, None
        gradient = self.carrier.grad
        if not carried or gradient is None:
            return None
        read = copy_to_host(gradient)
        if not gradient.is_cpu or any(read()):
            gradient.zero_()
        return lambda: [value != 0 for value in read()[:carried]]
