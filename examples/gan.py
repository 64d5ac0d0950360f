"""A GAN that learns to draw scikit-learn's bundled digits (8x8, no download): manual optimization with two
optimizers, the generator's and the discriminator's, stepped in turn on every batch. Samples of the generator
are logged to TensorBoard after each epoch. Written as for Lightning: replacing `statemachine` with
`lightning.pytorch` in the imports is the only change it needs to run there.

    python examples/gan.py [--max-epochs N] [--root DIR]
"""

from __future__ import annotations

import argparse
import os

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import statemachine as pl
from statemachine.loggers import TensorBoardLogger


class DigitsDataModule(pl.LightningDataModule):
    """The digits as images in [-1, 1], the generator's output range."""

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        digits = load_digits()
        images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
        self.dataset = TensorDataset(images, torch.tensor(digits.target))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True, drop_last=True)


class Generator(nn.Module):
    def __init__(self, latent_dim: int, img_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.img_shape = img_shape
        self.model = nn.Sequential(
            nn.Linear(latent_dim, 128),
            nn.LeakyReLU(0.2),
            nn.Linear(128, 128),
            nn.BatchNorm1d(128),
            nn.LeakyReLU(0.2),
            nn.Linear(128, int(torch.tensor(img_shape).prod())),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.model(z).view(z.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self, img_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(int(torch.tensor(img_shape).prod()), 128),
            nn.LeakyReLU(0.2),
            nn.Linear(128, 1),
        )

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.model(img)


class GAN(pl.LightningModule):
    def __init__(self, latent_dim: int = 32, lr: float = 2e-4, b1: float = 0.5, b2: float = 0.999) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        img_shape = (1, 8, 8)
        self.generator = Generator(latent_dim, img_shape)
        self.discriminator = Discriminator(img_shape)
        self.validation_z = torch.randn(16, latent_dim)
        self.example_input_array = torch.zeros(2, latent_dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def adversarial_loss(self, logits: torch.Tensor, is_real: bool) -> torch.Tensor:
        target = torch.full_like(logits, 1.0 if is_real else 0.0)
        return nn.functional.binary_cross_entropy_with_logits(logits, target)

    def training_step(self, batch: list[torch.Tensor]) -> None:
        imgs, _ = batch
        optimizer_g, optimizer_d = self.optimizers()
        z = torch.randn(imgs.size(0), self.hparams.latent_dim).type_as(imgs)

        # the generator: make the discriminator call its images real
        self.toggle_optimizer(optimizer_g)
        g_loss = self.adversarial_loss(self.discriminator(self(z)), is_real=True)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        # the discriminator: tell real images from generated ones
        self.toggle_optimizer(optimizer_d)
        real_loss = self.adversarial_loss(self.discriminator(imgs), is_real=True)
        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), is_real=False)
        d_loss = (real_loss + fake_loss) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

    def configure_optimizers(self) -> tuple[list[torch.optim.Optimizer], list]:
        betas = (self.hparams.b1, self.hparams.b2)
        optimizer_g = torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr, betas=betas)
        optimizer_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.hparams.lr, betas=betas)
        return [optimizer_g, optimizer_d], []

    def on_train_epoch_end(self) -> None:
        samples = self(self.validation_z.to(self.device))
        self.logger.experiment.add_images("generated_images", (samples + 1) / 2, self.current_epoch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-epochs", type=int, default=50)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "runs", "gan"))
    args = parser.parse_args()

    pl.seed_everything(42)
    trainer = pl.Trainer(
        max_epochs=args.max_epochs,
        default_root_dir=args.root,
        logger=TensorBoardLogger(args.root, log_graph=True),
        log_every_n_steps=10,
    )
    trainer.fit(GAN(), datamodule=DigitsDataModule())
    metrics = trainer.callback_metrics
    print(
        f"after {trainer.global_step} optimizer steps: g_loss {metrics['g_loss']:.4f}, d_loss {metrics['d_loss']:.4f}"
    )
    print(f"generated samples: tensorboard --logdir {trainer.logger.log_dir}")


if __name__ == "__main__":
    main()
