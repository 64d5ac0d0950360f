"""A ddp_fork fit started while this process holds uncollected garbage that owns a thread: a rendezvous store left
in a reference cycle, as a finished run's can be. The ranks collect their garbage in `training_step` (as some users'
code does). Prints "finished" when the fit returns; a rank that ran the inherited store's destructor would hang.

    python tests/scripts/fork_with_garbage.py ROOT
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import quiet_trainer
from ddp_app import RankModel, loader

from devices.environments import LOOPBACK, find_free_port


class Collecting(RankModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        gc.collect()
        return super().training_step(batch, batch_idx)


class Holder:
    """Refers to itself, so only the cycle collector frees it."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.itself = self


def main(root: str) -> None:
    holder = Holder(dist.TCPStore(LOOPBACK, find_free_port(), None, is_master=True, wait_for_workers=False))
    gc.collect()  # still referenced: the cycle moves to the oldest generation
    del holder  # garbage now, found only by a full collection
    trainer = quiet_trainer(root, strategy="ddp_fork", devices=2, accelerator="cpu")
    trainer.fit(Collecting(), loader(4))
    print(trainer.state.status)


if __name__ == "__main__":
    main(sys.argv[1])
