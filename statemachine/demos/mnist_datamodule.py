"""`lightning.pytorch.demos.mnist_datamodule` on generated data: `MNIST` and `MNISTDataModule` serve synthetic
digit-like images, not the real MNIST dataset, because nothing is downloaded here.

Each image is one of ten hand-drawn 7x5 glyphs ("0" to "9"), scaled into the middle of a 28x28 canvas and
randomly rotated, scaled, sheared and shifted, with a random stroke intensity. The label is the glyph's digit.
The images come from a fixed seed per split, so every run and every machine with the same torch build gets the
same data: 60000 training and 10000 test images, as in MNIST.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, random_split

from stages.datamodule import LightningDataModule
from statemachine.demos._files import ensure_file, tensors_bytes

__all__ = ["MNIST", "MNISTDataModule"]

_DATASETS_PATH = "./data"
_GLYPHS = (
    (" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "),
    ("  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
    (" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"),
    ("#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "),
    ("   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "),
    ("#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "),
    ("  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "),
    ("#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "),
    (" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "),
    (" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "),
)
_SIZES = {True: 60000, False: 10000}
_SEEDS = {True: 0, False: 1}  # the training and test splits are drawn independently
_CHUNK = 10000  # images rendered at once, bounding the memory the rendering takes


def _templates() -> Tensor:
    """The ten glyphs, blown up to 21x15 pixels with softened strokes, centred on a 28x28 canvas: (10, 1, 28, 28)
    in [0, 1]."""
    bitmaps = torch.tensor([[[cell == "#" for cell in row] for row in glyph] for glyph in _GLYPHS])
    blown_up = F.interpolate(bitmaps.float().unsqueeze(1), scale_factor=3, mode="nearest")
    # the blur joins the corners of diagonal strokes, as a pen would
    soft = (F.avg_pool2d(blown_up, kernel_size=3, stride=1, padding=1) * 1.5).clamp(0.0, 1.0)
    return F.pad(soft, (6, 7, 3, 4))


def _random_affine(count: int, generator: torch.Generator) -> Tensor:
    """Per image: rotation within 12 degrees, scale 0.85 to 1.15, shear within 0.15, shift within 2 pixels."""

    def uniform(low: float, high: float) -> Tensor:
        return low + (high - low) * torch.rand(count, generator=generator)

    angle = uniform(-math.radians(12), math.radians(12))
    scale = uniform(0.85, 1.15)
    shear = uniform(-0.15, 0.15)
    shift_x, shift_y = uniform(-0.15, 0.15), uniform(-0.15, 0.15)
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    row_x = torch.stack([cos, -sin + shear, shift_x], dim=1)
    row_y = torch.stack([sin, cos, shift_y], dim=1)
    return torch.stack([row_x, row_y], dim=1)


def _render(labels: Tensor, generator: torch.Generator) -> Tensor:
    """Images of `labels` as MNIST stores them: (N, 28, 28) uint8."""
    templates = _templates()[labels]
    theta = _random_affine(len(labels), generator)
    grid = F.affine_grid(theta, list(templates.shape), align_corners=False)
    images = F.grid_sample(templates, grid, align_corners=False)
    intensity = 0.75 + 0.25 * torch.rand(len(labels), 1, 1, 1, generator=generator)
    return (images * intensity * 255).round().clamp(0, 255).to(torch.uint8).squeeze(1)


def generate_digits(train: bool) -> tuple[Tensor, Tensor]:
    """The generated split: images (N, 28, 28) uint8 and labels (N,) int64, the same on every call."""
    generator = torch.Generator().manual_seed(_SEEDS[train])
    labels = torch.randint(0, 10, (_SIZES[train],), generator=generator)
    images = torch.cat([_render(chunk, generator) for chunk in labels.split(_CHUNK)])
    return images, labels


def _split_bytes(train: bool) -> bytes:
    return tensors_bytes(generate_digits(train))


class MNIST(Dataset):
    """Generated digit-like images with MNIST's shapes, not the real MNIST: item `i` is `(image, label)`, a float32
    tensor (1, 28, 28) and an int. Pixels are in [0, 1], then standardised with `normalize=(mean, std)` (None
    keeps them in [0, 1]).

    The data lives in `root/MNIST/synthetic/` (`training.pt`, `test.pt`). `download=True` generates those files
    when they are missing (nothing is downloaded); `download=False` reads them and raises `RuntimeError`
    "Dataset not found." when they are not there. `transform` and `target_transform`, as in torchvision, receive
    the image tensor and the label.
    """

    TRAIN_FILE_NAME = "training.pt"
    TEST_FILE_NAME = "test.pt"
    cache_folder_name = "synthetic"

    def __init__(
        self,
        root: str,
        train: bool = True,
        normalize: tuple[float, float] | None = (0.1307, 0.3081),
        download: bool = True,
        transform: Callable[[Tensor], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
    ) -> None:
        super().__init__()
        self.root = root
        self.train = train
        self.normalize = normalize
        self.transform = transform
        self.target_transform = target_transform
        self.prepare_data(download)
        path = os.path.join(self.cached_folder_path, self.TRAIN_FILE_NAME if train else self.TEST_FILE_NAME)
        self.data, self.targets = torch.load(path, weights_only=True)

    @property
    def cached_folder_path(self) -> str:
        return os.path.join(self.root, "MNIST", self.cache_folder_name)

    def prepare_data(self, download: bool = True) -> None:
        """Generate both splits' files if they are missing and `download` is True; refuse if they are missing."""
        for train, name in ((True, self.TRAIN_FILE_NAME), (False, self.TEST_FILE_NAME)):
            path = os.path.join(self.cached_folder_path, name)
            ensure_file(path, download, partial(_split_bytes, train))

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image = self.data[index].float().unsqueeze(0) / 255
        if self.normalize is not None:
            mean, std = self.normalize
            image = (image - mean) / std
        target = int(self.targets[index])
        image_out = image if self.transform is None else self.transform(image)
        return image_out, target if self.target_transform is None else self.target_transform(target)

    def __len__(self) -> int:
        return len(self.data)


class MNISTDataModule(LightningDataModule):
    """Train, validation and test loaders over the generated `MNIST` above (synthetic digit-like images, not the
    real MNIST). `prepare_data` generates the files in `data_dir`; `setup` splits `val_split` of the 60000
    training images off for validation, with `seed`; the test loader serves the 10000 test images. With
    `normalize=True` the pixels are mapped from [0, 1] to [-1, 1]. The loaders drop their last partial batch.
    """

    name = "mnist"

    def __init__(
        self,
        data_dir: str = _DATASETS_PATH,
        val_split: int = 5000,
        num_workers: int = 16,
        normalize: bool = False,
        seed: int = 42,
        batch_size: int = 32,
    ) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    def _dataset(self, train: bool) -> MNIST:
        normalize = (0.5, 0.5) if self.normalize else None
        return MNIST(self.data_dir, train=train, normalize=normalize, download=False)

    def prepare_data(self) -> None:
        MNIST(self.data_dir, train=True, download=True)

    def setup(self, stage: str) -> None:
        dataset = self._dataset(train=True)
        lengths = [len(dataset) - self.val_split, self.val_split]
        generator = torch.Generator().manual_seed(self.seed)
        self.dataset_train, self.dataset_val = random_split(dataset, lengths, generator=generator)

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            drop_last=True,
            pin_memory=torch.cuda.is_available(),  # pinning without a GPU only warns
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_val, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._dataset(train=False), shuffle=False)
