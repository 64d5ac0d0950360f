"""Flags the ranks agree on, carried by DDP's gradient all-reduce instead of a collective of their own."""

# No postponed annotations here: DDP reads a communication hook's annotations at runtime and refuses strings.

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


class FlagsRideGradients:
    """DDP's gradient all-reduce (each bucket summed over the ranks, divided by their number first, as DDP's own
    does it), carrying boarded flags at the end of the first bucket of the next backward: they are summed with
    the gradients and split off again, nonzero where any rank raised them."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.boarded: Tensor | None = None
        self.agreed: Tensor | None = None

    def board(self, flags: Tensor) -> None:
        self.boarded, self.agreed = flags, None

    def alight(self) -> Tensor | None:
        """The boarded flags, agreed; None when no backward carried them. Either way they leave."""
        agreed, self.boarded, self.agreed = self.agreed, None, None
        return agreed

    def all_reduce(self, _: Any, bucket: dist.GradBucket) -> torch.futures.Future[Tensor]:
        gradients = bucket.buffer().div_(self.size)
        flags = self.boarded if bucket.index() == 0 else None
        if flags is None:
            future = dist.all_reduce(gradients, group=self.group, async_op=True).get_future()
            return future.then(lambda done: done.value()[0])
        self.boarded, length = None, gradients.numel()
        joined = torch.cat([gradients, flags.to(gradients.device, gradients.dtype)])

        def split(done: torch.futures.Future[list[Tensor]]) -> Tensor:
            # DDP's backward waits for this before it returns: the flags are agreed by the time a step is done.
            self.agreed = done.value()[0][length:]
            return done.value()[0][:length]

        return dist.all_reduce(joined, group=self.group, async_op=True).get_future().then(split)
