"""Distributed samplers: each rank reads its own share of every loader (`use_distributed_sampler=True`).

Training, validation and test get a `DistributedSampler` (shuffling if the user's loader shuffled; padded so every
rank runs the same number of batches). Predict gets a sampler that never repeats a sample, so ranks may differ by a
batch. A loader whose sampler is already distributed, or that reads an iterable dataset, is left as it is.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, cast

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from stages.combined_loader import CombinedLoader


def distribute(loaders: Any, kind: str, world_size: int, rank: int, shuffle: bool = True) -> Any:
    """`loaders` (one, a list/tuple/dict of them, or a CombinedLoader) with a distributed sampler on each
    DataLoader; a training loader that shuffled keeps shuffling unless `shuffle` is False."""
    if isinstance(loaders, Mapping):
        rebuilt = {key: distribute(value, kind, world_size, rank, shuffle) for key, value in loaders.items()}
        return type(loaders)(rebuilt) if isinstance(loaders, dict) else rebuilt
    if isinstance(loaders, list | tuple):
        return type(loaders)(distribute(value, kind, world_size, rank, shuffle) for value in loaders)
    if isinstance(loaders, CombinedLoader):
        loaders.flattened = [distribute(member, kind, world_size, rank, shuffle) for member in loaders.flattened]
        return loaders
    if not isinstance(loaders, DataLoader) or isinstance(loaders.dataset, IterableDataset):
        return loaders
    sampler = loaders.sampler
    if isinstance(sampler, DistributedSampler | _UnrepeatedSampler | _DistributedWrapper):
        return loaders
    if type(loaders.batch_sampler) is not BatchSampler:
        raise ValueError(
            f"the {kind} DataLoader has a custom batch_sampler ({type(loaders.batch_sampler).__name__}), which cannot "
            "be split across ranks automatically; give each rank its share yourself and pass "
            "Trainer(use_distributed_sampler=False)"
        )
    seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
    if kind == "predict":
        # torch types Dataset without __len__; a map-style one has it (an IterableDataset was returned above)
        replacement: Sampler[int] = _UnrepeatedSampler(len(cast(Sized, loaders.dataset)), world_size, rank)
    elif isinstance(sampler, RandomSampler | SequentialSampler):
        shuffles = shuffle and isinstance(sampler, RandomSampler) and kind == "train"
        replacement = DistributedSampler(loaders.dataset, world_size, rank, shuffle=shuffles, seed=seed)
    else:
        replacement = _DistributedWrapper(sampler, world_size, rank)
    return rebuild(loaders, replacement)


def rebuild(loader: DataLoader, sampler: Sampler[int] | None, shuffle: bool = False) -> DataLoader:
    """A DataLoader like `loader` but reading through `sampler` (or plainly, shuffled or not, when it is None)."""
    options = loader_options(loader)
    options.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    if sampler is None:
        return DataLoader(loader.dataset, shuffle=shuffle, **options)
    return DataLoader(loader.dataset, sampler=sampler, **options)


def loader_options(loader: DataLoader) -> dict[str, Any]:
    """What a rebuilt DataLoader keeps of `loader` besides its dataset and how it samples and batches."""
    options: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
    }
    if loader.num_workers > 0:
        options.update(
            prefetch_factor=loader.prefetch_factor,
            persistent_workers=loader.persistent_workers,
            multiprocessing_context=loader.multiprocessing_context,
        )
    return options


class _UnrepeatedSampler(Sampler[int]):
    """Rank r reads indices r, r + world, r + 2*world, ...: every sample once, shares differ by at most one."""

    def __init__(self, size: int, world_size: int, rank: int) -> None:
        self.size, self.world_size, self.rank = size, world_size, rank

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.size, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.size, self.world_size))


def repeated_samples(sampler: Any) -> int | None:
    """How many samples a distributed sampler made here repeats to give every rank as many: None for another."""
    if isinstance(sampler, DistributedSampler):
        return sampler.total_size - len(cast(Sized, sampler.dataset))
    if isinstance(sampler, _DistributedWrapper):
        drawn = len(cast(Sized, sampler.sampler))
        return -drawn % sampler.world_size
    return None


class _DistributedWrapper(Sampler[int]):
    """A user's own (non-distributed) sampler split across ranks: each epoch its order is drawn once, padded
    to a multiple of the world size by repeating from the start, and rank r takes every world-th index."""

    def __init__(self, sampler: Iterable[int], world_size: int, rank: int) -> None:
        self.sampler, self.world_size, self.rank = sampler, world_size, rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        order = list(self.sampler)
        total = math.ceil(len(order) / self.world_size) * self.world_size if order else 0
        repeats = math.ceil(total / len(order)) if order else 0
        padded = (order * repeats)[:total]
        return iter(padded[self.rank : total : self.world_size])

    def __len__(self) -> int:
        return math.ceil(len(cast(Sized, self.sampler)) / self.world_size)  # a loader's sampler has a length
