"""A fit that a parent process floods with SIGINTs: prints READY from training_step, then waits for them.

After the KeyboardInterrupt (the fit ends with SystemExit(1) from it) it prints the machine's state and the
interrupt dump's last record, then fits again on the same trainer to show the trainer accepts its next call.
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L
from statemachine.engine.history import load_history


class SlowShutdown(L.Callback):
    """Keeps the interrupt path busy while the parent's flood of presses arrives."""

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass


class Waits(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)
        self.first = True

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.first:
            self.first = False
            print("READY", flush=True)
            end = time.monotonic() + 30
            while time.monotonic() < end:  # busy, so the presses interrupt Python code at once
                pass
        x, y = batch
        return nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=sys.argv[1],
        callbacks=[SlowShutdown()],
    )
    model = Waits()
    try:
        trainer.fit(model, data)
    except SystemExit as exit:  # Ctrl-C ends a run with SystemExit(1), raised from the KeyboardInterrupt
        print(f"SystemExit({exit.code}) from {type(exit.__cause__).__name__}", flush=True)
    dump = load_history(trainer.history_dump_path)
    print(f"STATE {trainer.state.status} LAST {dump.records[-1].trigger}->{dump.records[-1].dest}", flush=True)
    trainer.fit(model, data)
    print(f"AGAIN {trainer.state.status} {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
