"""Seeding every random generator a training run draws from."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

from stages.combined_loader import CombinedLoader
from stages.console import show_info_on_the_console
from stages.exceptions import TrainerWarning
from stages.rank_zero import launcher_rank, rank_zero_warn

SEED_WORKERS_VARIABLE = "PL_SEED_WORKERS"
_MAX_SEED = 2**32 - 1  # numpy's generators take 32-bit seeds
_log = logging.getLogger(__name__)


def seed_everything(seed: int | float | str | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed python, numpy (when installed) and torch (CPU and every CUDA device); returns the seed used.

    Without `seed`, the one in `PL_GLOBAL_SEED` (which a launcher hands to its processes), else 0 with a warning.
    With `workers=True`, the trainer's DataLoaders that have no `worker_init_fn` of their own get one that seeds
    each worker process from this seed, the worker's index and the rank (see `seed_worker`). `verbose` says the
    seed on each process (a warning when none was found, an INFO log line of the seed set)."""
    if not isinstance(workers, bool):
        raise ValueError(f"workers={workers!r} must be a bool")
    if seed is None:
        found = os.environ.get("PL_GLOBAL_SEED")
        if found is None:
            seed = 0
            if verbose:
                rank_zero_warn(f"No seed found, seed set to {seed}", category=TrainerWarning)
        else:
            try:
                seed = int(found)
            except ValueError:
                raise ValueError(f"Invalid seed specified via PL_GLOBAL_SEED: {found!r}") from None
    else:
        seed = int(seed)  # "42" and 42.0 are taken, as Lightning takes them
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"{seed} is not in bounds, numpy accepts from 0 to {_MAX_SEED}")
    if verbose:
        show_info_on_the_console()
        rank = launcher_rank()
        _log.info(f"[rank: {rank}] Seed set to {seed}" if rank is not None else f"Seed set to {seed}")
    os.environ[SEED_WORKERS_VARIABLE] = "1" if workers else "0"
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
