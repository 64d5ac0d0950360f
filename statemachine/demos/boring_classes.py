"""The minimal models and random datasets of Lightning's demos (`lightning.pytorch.demos.boring_classes`).

`BoringModel` is a 32 -> 2 linear layer trained towards all-ones outputs with SGD (lr 0.1) and a StepLR, on
`RandomDataset(32, 64)` for every stage; subclass it and override one method to reproduce a bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from stages.datamodule import LightningDataModule
from stages.module import LightningModule

__all__ = [
    "BoringDataModule",
    "BoringDataModuleNoLen",
    "BoringModel",
    "DemoModel",
    "IterableBoringDataModule",
    "ManualOptimBoringModel",
    "Net",
    "RandomDataset",
    "RandomDictDataset",
    "RandomIterableDataset",
    "RandomIterableDatasetWithLen",
]


class RandomDataset(Dataset):
    """`length` random vectors of `size` standard-normal values."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(RandomDataset):
    """Each item is `{"a": x, "b": x + 2}` for a random vector x."""

    def __getitem__(self, index: int) -> dict[str, Tensor]:  # type: ignore[override]
        a = self.data[index]
        return {"a": a, "b": a + 2}


class RandomIterableDataset(IterableDataset):
    """`count` fresh random vectors of `size` values per pass, without a length."""

    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Iterator[Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """`RandomIterableDataset` that also reports its length."""

    def __len__(self) -> int:
        return self.count


class BoringModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        if labels is None:
            labels = torch.ones_like(preds)
        return nn.functional.mse_loss(preds, labels)

    def step(self, batch: Any) -> Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, Tensor]:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> dict[str, Tensor]:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """BoringModel with manual optimization: one backward and one step per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


class BoringDataModule(LightningDataModule):
    """Four disjoint splits of 64 items of one `RandomDataset(32, 256)`."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = Subset(self.random_full, range(0, 64))
            self.random_val = Subset(self.random_full, range(64, 128))
        elif stage == "validate":
            self.random_val = Subset(self.random_full, range(64, 128))
        elif stage == "test":
            self.random_test = Subset(self.random_full, range(128, 192))
        else:
            self.random_predict = Subset(self.random_full, range(192, 256))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class BoringDataModuleNoLen(LightningDataModule):
    """Loaders without a length: `RandomIterableDataset(32, n)` with 512 training, 128 validation, 256 test and
    64 predict items."""

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = RandomIterableDataset(32, 512)
        if stage in ("fit", "validate"):
            self.random_val = RandomIterableDataset(32, 128)
        if stage == "test":
            self.random_test = RandomIterableDataset(32, 256)
        if stage == "predict":
            self.random_predict = RandomIterableDataset(32, 64)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class IterableBoringDataModule(LightningDataModule):
    """Two loaders per stage, a sized `RandomDataset(4, n)` and an unsized `RandomIterableDataset(4, n)`: n is
    16 for training, 32 for validation, 64 for test and 128 for predict."""

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.train_datasets = self._pair(16)
        if stage in ("fit", "validate"):
            self.val_datasets = self._pair(32)
        if stage == "test":
            self.test_datasets = self._pair(64)
        if stage == "predict":
            self.predict_datasets = self._pair(128)

    @staticmethod
    def _pair(length: int) -> list[Dataset]:
        return [RandomDataset(4, length), RandomIterableDataset(4, length)]

    def train_dataloader(self) -> list[DataLoader]:
        return [DataLoader(dataset) for dataset in self.train_datasets]

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(dataset) for dataset in self.val_datasets]

    def test_dataloader(self) -> list[DataLoader]:
        return [DataLoader(dataset) for dataset in self.test_datasets]

    def predict_dataloader(self) -> list[DataLoader]:
        return [DataLoader(dataset) for dataset in self.predict_datasets]


class DemoModel(LightningModule):
    """A linear layer with ReLU on 32 features; the loss is the sum of its outputs (logged as `train_loss`,
    `valid_loss`, `test_loss`)."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("valid_loss", self(batch).sum())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self(batch).sum())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class Net(nn.Module):
    """The convolutional MNIST classifier of PyTorch's examples: (N, 1, 28, 28) images to (N, 10)
    log-probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(torch.flatten(self.dropout1(x), 1)))
        return F.log_softmax(self.fc2(self.dropout2(x)), dim=1)
