"""Two ranks, one of which stops arriving: `python stall_app.py OUT STRATEGY RANK` (ddp or fsdp; the rank that
stalls).

At global step 3 that rank blocks forever in its training step (as a hang in user code would), after writing the
time to `OUT/stalled_at`; the strategy's timeout is 5 seconds. Each process writes its pid to `OUT/pid<R>`, so the
test can check that none is left running.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import statemachine as L
from statemachine.strategies import DDPStrategy, FSDPStrategy

TIMEOUT = timedelta(seconds=5)


class Stalling(L.LightningModule):
    def __init__(self, out: Path, stalls: int) -> None:
        super().__init__()
        self.out, self.stalls = out, stalls
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        if self.global_rank == self.stalls and self.global_step == 3:
            (self.out / "stalled_at").write_text(str(time.time()))
            wait_for_what_never_comes()
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def wait_for_what_never_comes() -> None:
    threading.Event().wait()


def main() -> None:
    out, kind, stalls = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    strategy = DDPStrategy(timeout=TIMEOUT) if kind == "ddp" else FSDPStrategy(timeout=TIMEOUT)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
    )
    (out / f"pid{trainer.global_rank}").write_text(str(os.getpid()))
    x = torch.randn(64, 4)
    trainer.fit(Stalling(out, stalls), DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4))


if __name__ == "__main__":
    main()
