"""seed_everything(workers=True): each DataLoader worker draws its own numbers, the same in every run."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import numpy
import pytest
import torch
from conftest import quiet_trainer
from torch.utils.data import DataLoader, Dataset

import statemachine as L


class Draws(Dataset):
    """Each item is what python's and numpy's global generators give in the process that loads it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([random.random(), float(numpy.random.rand())])


class Recorder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.batches: list[list[float]] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.batches.append(batch.flatten().tolist())
        return self.layer(batch).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


@pytest.fixture(autouse=True)
def _no_leftover_worker_seeding() -> Iterator[None]:
    yield
    os.environ.pop("PL_SEED_WORKERS", None)


def _fit(tmp_path: Any, loader: DataLoader) -> list[list[float]]:
    model = Recorder()
    quiet_trainer(tmp_path).fit(model, loader)
    return model.batches


def _loader(**options: Any) -> DataLoader:
    # one item per batch and two workers: batches 0, 2, ... come from worker 0, batches 1, 3, ... from worker 1
    return DataLoader(Draws(), batch_size=1, num_workers=2, multiprocessing_context="fork", **options)


def test_workers_draw_different_numbers_and_a_run_repeats_with_the_same_seed(tmp_path: Any) -> None:
    L.seed_everything(7, workers=True)
    first = _fit(tmp_path, _loader())
    L.seed_everything(7, workers=True)
    again = _fit(tmp_path, _loader())

    assert first == again
    assert first[0] != first[1]  # worker 0's first draw is not worker 1's
    assert len({tuple(batch) for batch in first}) == len(first)


def test_a_loaders_own_worker_init_fn_is_left_alone_and_the_ranks_workers_differ(tmp_path: Any) -> None:
    def own(worker_id: int) -> None:
        random.seed(100)

    L.seed_everything(7, workers=True)
    loader = _loader(worker_init_fn=own)
    _fit(tmp_path, loader)
    assert loader.worker_init_fn is own
    plain = _loader()
    _fit(tmp_path, plain)
    assert plain.worker_init_fn is not None

    from stages.seed import seed_worker

    # two ranks seeded alike give their workers the same base seed: the rank is what tells them apart
    drawn = []
    for rank in (0, 1):
        torch.manual_seed(5)
        seed_worker(0, rank=rank)
        drawn.append((random.random(), float(numpy.random.rand()), torch.rand(1).item()))
    assert drawn[0] != drawn[1]


def test_workers_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="workers='yes' must be a bool"):
        L.seed_everything(1, workers="yes")  # type: ignore[arg-type]
