"""Flags the ranks agree on, carried by DDP's gradient all-reduce instead of a collective of their own."""

# No postponed annotations here: DDP reads a communication hook's annotations at runtime and refuses strings.

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class FlagsRideGradients:
    """DDP's gradient all-reduce (torch's `allreduce_hook`: each bucket divided by the number of ranks, then summed
    over them, as DDP's built-in one does it), carrying boarded flags at the end of the first bucket of the next
    backward: they are summed with the gradients and split off again, nonzero where any rank raised them."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.boarded: Tensor | None = None
        self.agreed: Tensor | None = None

    def board(self, flags: Tensor) -> None:
        self.boarded = flags

    def alight(self) -> Tensor | None:
        """The boarded flags, agreed; None when no backward carried them. Either way they leave."""
        agreed, self.boarded, self.agreed = self.agreed, None, None
        return agreed

    def all_reduce(self, _: Any, bucket: dist.GradBucket) -> torch.futures.Future[Tensor]:
        flags = self.boarded
        if flags is None or bucket.index() != 0:
            return default_hooks.allreduce_hook(self.group, bucket)
        self.boarded = None
        gradients = bucket.buffer().div_(self.size)
        length = gradients.numel()
        joined = torch.cat([gradients, flags.to(gradients.device, gradients.dtype)])

        def split(done: torch.futures.Future[list[Tensor]]) -> Tensor:
            # DDP's backward waits for this before it returns: the flags are agreed by the time a step is done.
            reduced = done.value()[0]
            self.agreed = reduced[length:]
            return reduced[:length]

        return dist.all_reduce(joined, group=self.group, async_op=True).get_future().then(split)
