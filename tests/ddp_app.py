"""A small two-rank training program for tests/test_ddp.py.

Run as a script it is what users run: `python tests/ddp_app.py OUT --strategy ddp` (the trainer starts the script
again for rank 1) or under `torchrun --nproc-per-node 2`. Each rank writes `OUT/rank<R>.json` with what it saw.
Imported, its model and data serve the in-process spawn/fork tests.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import statemachine as L

SAMPLES = 32


def dataset(samples: int = SAMPLES) -> TensorDataset:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(samples, 4, generator=generator)
    y = (x.sum(dim=1) > 0).long()
    return TensorDataset(x, y, torch.arange(samples))


def loader(batch_size: int, shuffle: bool = False, samples: int = SAMPLES) -> DataLoader:
    return DataLoader(dataset(samples), batch_size=batch_size, shuffle=shuffle)


class RankModel(L.LightningModule):
    """Logs values that reveal whether they were synced; records its hooks; can fail on purpose."""

    def __init__(self, dropout: float = 0.0, fail: tuple[int, int, str] | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(dropout), nn.Linear(8, 2))
        self.fail = fail  # (rank, global step, "raise" or "kill")
        self.hooks: list[str] = []
        self.predicted: list[int] = []

    def _maybe_fail(self) -> None:
        if self.fail is None:
            return
        rank, step, how = self.fail
        if self.global_rank == rank and self.global_step == step:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError(f"injected failure at step {step}")

    def _loss(self, batch: Any) -> Tensor:
        x, y, _ = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        self._maybe_fail()
        loss = self._loss(batch)
        rank = float(self.global_rank)
        self.log("train_loss", loss, sync_dist=True)
        self.log("rank_mean", rank, on_step=False, on_epoch=True, sync_dist=True)
        self.log("rank_local", rank, on_step=False, on_epoch=True)
        self.log("rank_max", rank, on_step=True, on_epoch=False, sync_dist=True, reduce_fx="max")
        self.log("only_zero", 10.0 + rank, on_step=False, on_epoch=True, rank_zero_only=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), sync_dist=True)
        self.log("val_rank_sum", float(self.global_rank), sync_dist=True, reduce_fx="sum")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_rank", float(self.global_rank), sync_dist=True)

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        self.predicted.extend(batch[2].tolist())
        return batch[2]

    def on_train_epoch_end(self) -> None:
        self.hooks.append("on_train_epoch_end")
        gathered = self.all_gather(torch.tensor([float(self.global_rank)]))
        self.log("gathered_sum", gathered.sum())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)


for _hook in (
    "setup",
    "on_fit_start",
    "on_train_start",
    "on_train_epoch_start",
    "on_validation_start",
    "on_train_epoch_end",
    "on_train_end",
    "on_fit_end",
    "on_test_start",
    "on_predict_start",
    "teardown",
):

    def _recording(self: RankModel, *args: Any, _name: str = _hook, **kwargs: Any) -> Any:
        self.hooks.append(_name)
        return getattr(L.LightningModule, _name)(self, *args, **kwargs)

    if _hook != "on_train_epoch_end":
        setattr(RankModel, _hook, _recording)


def weights(module: nn.Module) -> list[float]:
    return [float(v) for p in module.parameters() for v in p.detach().flatten()]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--fail", default=None, help="RANK:STEP:raise|kill")
    parser.add_argument("--test-alone", action="store_true", help="then test on rank 0 alone with devices=1")
    options = parser.parse_args(argv)
    out = Path(options.out)
    L.seed_everything(3)
    fail = None
    if options.fail:
        rank, step, how = options.fail.split(":")
        fail = (int(rank), int(step), how)
    model = RankModel(fail=fail)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=options.strategy,
        max_epochs=2,
        logger=L.CSVLogger(out),
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
        log_every_n_steps=1,
    )
    trainer.fit(model, loader(4), loader(4))
    fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    validated = trainer.validate(model, loader(4), verbose=False)
    tested = trainer.test(model, loader(4), verbose=False)
    predictions = trainer.predict(model, loader(3, samples=SAMPLES - 1))
    record = {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "hooks": list(model.hooks),
        "fit_metrics": fit_metrics,
        "validated": validated,
        "tested": tested,
        "predicted": model.predicted,
        "predictions": [int(i) for batch in predictions for i in batch],
        "weights": weights(model),
        "best_model_path": trainer.checkpoint_callback.best_model_path,
        "log_dir": trainer.log_dir,
    }
    if options.test_alone and trainer.is_global_zero:
        # a common pattern: a one-device trainer on rank 0 alone, after the multi-process run (whose process group
        # still exists: it must not be taken for one the user made)
        alone = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, default_root_dir=out)
        record["tested_alone"] = alone.test(model, loader(4), verbose=False)
        record["alone_world_size"] = alone.world_size
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1:])
