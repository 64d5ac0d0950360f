"""Train a small classifier on scikit-learn's bundled digits (8x8 images, no download) with the statemachine
Trainer, then test it, and leave the run's state history and a diagram of its path next to the checkpoint.

    python examples/digits.py [--epochs N] [--root DIR] [--lr-plot FILE.png]

With `--lr-plot`, the learning rate finder runs first (fit then trains with its suggestion) and its loss-vs-rate
curve is saved to FILE.png (needs matplotlib: `pip install 'statemachine-trainer[plot]'`).
"""

from __future__ import annotations

import argparse
import os

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import statemachine as L
from statemachine.engine.diagram import GraphvizMissingError, build_graph, write_graph
from statemachine.engine.history import load_history


class DigitsData(L.LightningDataModule):
    def __init__(self, batch_size: int = 64):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        images, labels = load_digits(return_X_y=True)
        features = torch.tensor(images, dtype=torch.float32) / 16.0
        dataset = TensorDataset(features, torch.tensor(labels))
        generator = torch.Generator().manual_seed(0)
        self.train_set, self.val_set, self.test_set = random_split(dataset, [1257, 270, 270], generator=generator)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=256)


class DigitsClassifier(L.LightningModule):
    def __init__(self, hidden: int = 128, lr: float = 2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _loss_and_accuracy(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self(x)
        return nn.functional.cross_entropy(logits, y), (logits.argmax(dim=1) == y).float().mean()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, _ = self._loss_and_accuracy(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, accuracy = self._loss_and_accuracy(batch)
        self.log_dict({"val_loss": loss, "val_acc": accuracy}, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        _, accuracy = self._loss_and_accuracy(batch)
        self.log("test_acc", accuracy)

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "runs", "digits"))
    parser.add_argument("--lr-plot", help="run the learning rate finder first and save its plot to this PNG")
    args = parser.parse_args()

    L.seed_everything(0)
    trainer = L.Trainer(
        max_epochs=args.epochs,
        log_every_n_steps=10,
        default_root_dir=args.root,
        callbacks=[L.ModelCheckpoint(monitor="val_acc", mode="max")],
    )
    model, data = DigitsClassifier(), DigitsData()
    table = L.TABLE
    if args.lr_plot:
        from statemachine.tuner import TUNER_TABLE, Tuner

        table = TUNER_TABLE  # the finder runs in the tuner's states
        lr_finder = Tuner(trainer).lr_find(model, datamodule=data)
        lr_finder.plot(suggest=True).savefig(args.lr_plot)
        print(f"suggested learning rate: {model.hparams.lr:.3g} (plot: {args.lr_plot})")
    trainer.fit(model, datamodule=data)
    results = trainer.test(ckpt_path="best", datamodule=data, verbose=False)

    run_dir = os.path.dirname(trainer.checkpoint_callback.best_model_path)
    history_path = trainer.dump_history(os.path.join(run_dir, "state-history.json"))
    diagram_path = os.path.join(run_dir, "run-path")
    graph = build_graph(table, overlay=load_history(history_path))
    try:
        diagram = write_graph(graph, [f"{diagram_path}.dot", f"{diagram_path}.svg"])[-1]
    except GraphvizMissingError as missing:  # the DOT file is written; drawing it needs Graphviz's `dot`
        diagram = f"{missing}"

    print(f"test accuracy: {results[0]['test_acc']:.4f}")
    print(f"best checkpoint: {trainer.checkpoint_callback.best_model_path}")
    print(f"state history:   {history_path}  (view: python -m statemachine.history show {history_path})")
    print(f"run diagram:     {diagram}")


if __name__ == "__main__":
    main()
