"""An image classifier driven by LightningCLI: the model, the data and the Trainer are built from the command line
(or a config file), then it trains, tests the best checkpoint and predicts with it. The images are the generated
digit-like MNIST of `statemachine.demos` (not the real MNIST: nothing is downloaded). Written as for Lightning,
with the imports rewritten; there, `MNIST` downloads the real images and, when torchvision is installed, gives PIL
images, which need `transform=transforms.ToTensor()`.

    python examples/image_classifier.py --trainer.max_epochs 2 --model.learning_rate 0.003 --data.batch_size 64
    python examples/image_classifier.py --print_config   # the full config, to save and edit
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, random_split

from statemachine import LightningDataModule, LightningModule, cli_lightning_logo
from statemachine.cli import LightningCLI
from statemachine.demos.mnist_datamodule import MNIST


class Backbone(nn.Module):
    """A two-layer perceptron from 28x28 images to 10 class scores."""

    def __init__(self, hidden_dim: int = 128) -> None:
        super().__init__()
        self.l1 = nn.Linear(28 * 28, hidden_dim)
        self.l2 = nn.Linear(hidden_dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x.view(x.size(0), -1))))


class LitClassifier(LightningModule):
    def __init__(self, backbone: Backbone | None = None, learning_rate: float = 1e-4) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone if backbone is not None else Backbone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("valid_loss", nn.functional.cross_entropy(self(x), y), prog_bar=True)

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(dim=1) == y).float().mean())

    def predict_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, _ = batch
        return self(x).argmax(dim=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32, data_dir: str = "./data") -> None:
        super().__init__()
        self.batch_size = batch_size
        self.data_dir = data_dir

    def prepare_data(self) -> None:
        MNIST(self.data_dir, download=True)

    def setup(self, stage: str) -> None:
        dataset = MNIST(self.data_dir, train=True, download=False)
        self.mnist_train, self.mnist_val = random_split(
            dataset, [55000, 5000], generator=torch.Generator().manual_seed(42)
        )
        self.mnist_test = MNIST(self.data_dir, train=False, download=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=self.batch_size)


def cli_main() -> None:
    cli = LightningCLI(
        LitClassifier, MyDataModule, seed_everything_default=1234, save_config_kwargs={"overwrite": True}, run=False
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    results = cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule, verbose=False)
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    print(f"test accuracy: {results[0]['test_acc']:.4f}")
    print(f"first predicted digits: {predictions[0][:10].tolist()}")


if __name__ == "__main__":
    cli_lightning_logo()
    cli_main()
