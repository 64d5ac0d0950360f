"""Transfer learning with BackboneFinetuning on scikit-learn's bundled digits (8x8, no download). A small network
first learns to tell the digits 0-4 apart; its feature extractor then becomes the frozen backbone of a classifier
for the digits 5-9. Only the new head trains at first; at `--unfreeze-at` the backbone joins the optimizer with a
tenth of the learning rate, which then doubles each epoch. Written as for Lightning: replacing `statemachine` with
`lightning.pytorch` in the imports is the only change it needs to run there.

    python examples/finetuning.py [--pretrain-epochs N] [--max-epochs N] [--unfreeze-at N] [--root DIR]
"""

from __future__ import annotations

import argparse
import os

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import statemachine as pl
from statemachine.callbacks import BackboneFinetuning, ModelCheckpoint
from statemachine.loggers import CSVLogger


def make_backbone() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())


class DigitsSubset(pl.LightningDataModule):
    """The digits whose labels are in `digits`, relabelled 0..len(digits)-1."""

    def __init__(self, digits: tuple[int, ...], batch_size: int = 64) -> None:
        super().__init__()
        self.digits = digits
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        images, labels = load_digits(return_X_y=True)
        keep = torch.isin(torch.tensor(labels), torch.tensor(self.digits))
        features = torch.tensor(images, dtype=torch.float32)[keep] / 16.0
        targets = torch.tensor(labels)[keep] - min(self.digits)
        generator = torch.Generator().manual_seed(42)
        self.train_set, self.val_set = random_split(TensorDataset(features, targets), [0.8, 0.2], generator=generator)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


class Classifier(pl.LightningModule):
    """A backbone and a linear head; the backbone is loaded from `backbone_path` when one is given."""

    def __init__(self, num_classes: int = 5, lr: float = 1e-2, backbone_path: str | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = make_backbone()
        if backbone_path is not None:
            self.backbone.load_state_dict(torch.load(backbone_path))
        self.head = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # the frozen backbone is left out: BackboneFinetuning adds it when it unfreezes it
        return torch.optim.Adam(filter(lambda p: p.requires_grad, self.parameters()), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-epochs", type=int, default=10)
    parser.add_argument("--max-epochs", type=int, default=15)
    parser.add_argument("--unfreeze-at", type=int, default=5)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "runs", "finetuning"))
    args = parser.parse_args()
    pl.seed_everything(42)

    pretrain = pl.Trainer(
        max_epochs=args.pretrain_epochs,
        default_root_dir=os.path.join(args.root, "pretrain"),
        logger=False,
        enable_checkpointing=False,
    )
    pretrained = Classifier()
    pretrain.fit(pretrained, datamodule=DigitsSubset(digits=(0, 1, 2, 3, 4)))
    os.makedirs(args.root, exist_ok=True)
    backbone_path = os.path.join(args.root, "backbone.pt")
    torch.save(pretrained.backbone.state_dict(), backbone_path)

    finetune = pl.Trainer(
        max_epochs=args.max_epochs,
        default_root_dir=args.root,
        logger=CSVLogger(args.root, name="finetune"),
        callbacks=[
            BackboneFinetuning(unfreeze_backbone_at_epoch=args.unfreeze_at),
            ModelCheckpoint(filename="{epoch}", save_top_k=-1),
        ],
        log_every_n_steps=5,
    )
    model = Classifier(backbone_path=backbone_path)
    finetune.fit(model, datamodule=DigitsSubset(digits=(5, 6, 7, 8, 9)))
    print(f"validation accuracy on 5-9: {finetune.callback_metrics['val_acc']:.4f}")
    print(f"checkpoints: {os.path.dirname(finetune.checkpoint_callback.best_model_path)}")


if __name__ == "__main__":
    main()
