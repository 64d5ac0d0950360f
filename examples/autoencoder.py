"""An autoencoder on scikit-learn's bundled digits (8x8 images, no download), with a LightningDataModule and
ModelCheckpoint keeping the best reconstruction. Written as for Lightning: replacing `statemachine` with
`lightning.pytorch` in the imports is the only change it needs to run there.

    python examples/autoencoder.py [--max-epochs N] [--root DIR]
"""

from __future__ import annotations

import argparse
import os

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import statemachine as pl
from statemachine.callbacks import ModelCheckpoint
from statemachine.loggers import CSVLogger


class DigitsDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        images = torch.tensor(load_digits().data, dtype=torch.float32) / 16.0
        generator = torch.Generator().manual_seed(42)
        self.train_set, self.val_set, self.test_set = random_split(
            TensorDataset(images), [0.7, 0.15, 0.15], generator=generator
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=256)


class LitAutoEncoder(pl.LightningModule):
    def __init__(self, hidden_dim: int = 32, code_dim: int = 8, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(64, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, code_dim))
        self.decoder = nn.Sequential(
            nn.Linear(code_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 64), nn.Sigmoid()
        )
        self.example_input_array = torch.zeros(1, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The code of each image."""
        return self.encoder(x)

    def _reconstruction_loss(self, batch: list[torch.Tensor]) -> torch.Tensor:
        (x,) = batch
        return nn.functional.mse_loss(self.decoder(self.encoder(x)), x)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._reconstruction_loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self._reconstruction_loss(batch), prog_bar=True)

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("test_loss", self._reconstruction_loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "runs", "autoencoder"))
    args = parser.parse_args()

    pl.seed_everything(42)
    checkpoint = ModelCheckpoint(monitor="val_loss", mode="min", filename="autoencoder-{epoch:02d}-{val_loss:.4f}")
    trainer = pl.Trainer(
        max_epochs=args.max_epochs,
        default_root_dir=args.root,
        logger=CSVLogger(args.root),
        callbacks=[checkpoint],
        log_every_n_steps=5,
    )
    datamodule = DigitsDataModule()
    trainer.fit(LitAutoEncoder(), datamodule=datamodule)
    results = trainer.test(ckpt_path="best", datamodule=datamodule, verbose=False)
    print(f"best checkpoint: {checkpoint.best_model_path} (val_loss {checkpoint.best_model_score:.4f})")
    print(f"test reconstruction loss: {results[0]['test_loss']:.4f}")


if __name__ == "__main__":
    main()
