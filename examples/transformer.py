"""A transformer language model on the WikiText2 demo: it learns to predict the next word, validates each epoch
and tests at the end. The corpus is the generated one of `statemachine.demos` (made-up words from a fixed
grammar, not the real WikiText-2: nothing is downloaded). Written as for Lightning: replacing `statemachine` with
`lightning.pytorch` in the imports is the only change it needs to run there.

    python examples/transformer.py [--max-epochs N] [--root DIR] [--ninp 64 --nhid 128 --nlayers 2] ...
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

import statemachine as L
from statemachine import cli_lightning_logo
from statemachine.demos import Transformer, WikiText2
from statemachine.loggers import CSVLogger


class LanguageModel(L.LightningModule):
    def __init__(
        self, vocab_size: int, ninp: int = 64, nhead: int = 2, nhid: int = 128, nlayers: int = 2, lr: float = 3e-3
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = Transformer(vocab_size=vocab_size, ninp=ninp, nhead=nhead, nhid=nhid, nlayers=nlayers)

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        inputs, target = batch
        return nn.functional.nll_loss(self.model(inputs, target), target.view(-1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-epochs", type=int, default=5)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "runs", "transformer"))
    parser.add_argument("--data-dir", default="./data")
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--limit-train-batches", type=int, default=None, help="train on this many batches an epoch")
    parser.add_argument("--ninp", type=int, default=64)
    parser.add_argument("--nhid", type=int, default=128)
    parser.add_argument("--nlayers", type=int, default=2)
    args = parser.parse_args()

    L.seed_everything(42)
    dataset = WikiText2(data_dir=Path(args.data_dir))
    n = len(dataset)
    train = Subset(dataset, range(0, n * 8 // 10))
    val = Subset(dataset, range(n * 8 // 10, n * 9 // 10))
    test = Subset(dataset, range(n * 9 // 10, n))
    model = LanguageModel(dataset.vocab_size, ninp=args.ninp, nhid=args.nhid, nlayers=args.nlayers)
    trainer = L.Trainer(
        max_epochs=args.max_epochs,
        gradient_clip_val=0.25,
        limit_train_batches=args.limit_train_batches,
        default_root_dir=args.root,
        logger=CSVLogger(args.root),
        log_every_n_steps=5,
    )
    trainer.fit(
        model,
        DataLoader(train, batch_size=args.batch_size, shuffle=True),
        DataLoader(val, batch_size=args.batch_size),
    )
    (results,) = trainer.test(model, DataLoader(test, batch_size=args.batch_size), verbose=False)
    print(f"vocabulary: {dataset.vocab_size} words (guessing scores {math.log(dataset.vocab_size):.4f})")
    print(f"test loss: {results['test_loss']:.4f} (perplexity {math.exp(results['test_loss']):.1f})")


if __name__ == "__main__":
    cli_lightning_logo()
    main()
