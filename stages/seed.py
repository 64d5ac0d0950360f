"""Seeding every random generator a training run draws from."""

from __future__ import annotations

import functools
import hashlib
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

from stages.combined_loader import CombinedLoader

SEED_WORKERS_VARIABLE = "PL_SEED_WORKERS"


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed python, numpy (when installed) and torch (CPU and every CUDA device); returns the seed used.

    With `workers=True`, the trainer's DataLoaders that have no `worker_init_fn` of their own get one that seeds
    each worker process from this seed, the worker's index and the rank (see `seed_worker`)."""
    if not isinstance(workers, bool):
        raise ValueError(f"workers={workers!r} must be a bool")
    os.environ[SEED_WORKERS_VARIABLE] = "1" if workers else "0"
    if seed is None:
        seed = int(os.environ.get("PL_GLOBAL_SEED", random.randint(0, 2**32 - 1)))
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed} must be in [0, 2**32 - 1]")
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass  # numpy is optional: without it there is no numpy generator to seed
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)
    return seed


def add_worker_seeding(loaders: Any, rank: int) -> None:
    """After `seed_everything(workers=True)`: every DataLoader in `loaders` without a `worker_init_fn` gets
    `seed_worker` for this rank."""
    if os.environ.get(SEED_WORKERS_VARIABLE) != "1":
        return
    for loader in _dataloaders(loaders):
        if loader.worker_init_fn is None:
            loader.worker_init_fn = functools.partial(seed_worker, rank=rank)


def _dataloaders(loaders: Any) -> Iterator[DataLoader]:
    if isinstance(loaders, DataLoader):
        yield loaders
    elif isinstance(loaders, CombinedLoader):
        for member in loaders.flattened:
            yield from _dataloaders(member)
    elif isinstance(loaders, Mapping):
        for member in loaders.values():
            yield from _dataloaders(member)
    elif isinstance(loaders, list | tuple):
        for member in loaders:
            yield from _dataloaders(member)


def seed_worker(worker_id: int, rank: int = 0) -> None:
    """Seeds python, numpy and torch in a DataLoader worker. Forked workers would otherwise share the parent's
    python and numpy state and draw the same numbers; torch gives each worker `base + worker_id`, where `base`
    comes from the main process's generator (so from the global seed, and new each epoch). Mixing in the rank
    makes the ranks' workers differ too."""
    base = torch.initial_seed() - worker_id
    digest = hashlib.blake2b(f"{base}/{worker_id}/{rank}".encode(), digest_size=8).digest()
    seed = int.from_bytes(digest, "little")
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return  # numpy is optional: without it there is no numpy generator to seed
    numpy.random.seed(seed % 2**32)
