"""Dataloaders: where they come from, how many batches each gives, and how batches are fetched."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader, RandomSampler

from stages import samplers
from stages.datamodule import LightningDataModule
from stages.exceptions import MisconfigurationException
from stages.hooks import is_overridden
from stages.module import LightningModule

KINDS = ("train", "val", "test", "predict")


def has_source(trainer: Any, kind: str) -> bool:
    """Whether a loader for `kind` exists: passed to the entry point, or a DataModule or module hook."""
    if trainer._run.loaders.get(kind) is not None:
        return True
    hook = f"{kind}_dataloader"
    datamodule = trainer.datamodule
    if datamodule is not None:
        return is_overridden(hook, datamodule, LightningDataModule)
    return is_overridden(hook, trainer.lightning_module, LightningModule)


def request(trainer: Any, kind: str) -> Any:
    """Get the loader(s) for `kind`: the entry point's argument wins, then the DataModule, then the module."""
    given = trainer._run.loaders.get(kind)
    if given is None:
        hook = f"{kind}_dataloader"
        given = trainer._hooks.datamodule(hook) if trainer.datamodule is not None else trainer._hooks.module(hook)
    if trainer.use_distributed_sampler and trainer.strategy.is_distributed:
        # overfit_batches trains on the same first batches every epoch, so it never shuffles.
        shuffle = trainer.overfit_batches == 0
        return samplers.distribute(given, kind, trainer.world_size, trainer.global_rank, shuffle)
    return given


def as_list(loaders: Any) -> list[Any]:
    """Evaluation loaders run one after the other: a single loader, or a list, tuple or dict of them."""
    if loaders is None:
        return []
    if isinstance(loaders, Mapping):
        return list(loaders.values())
    if isinstance(loaders, list | tuple):
        return list(loaders)
    return [loaders]


def length(loader: Any) -> int | None:
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return None


def limited_batches(loader: Iterable[Any], limit: int | float, flag: str) -> int | float:
    """Batches per loader under a `limit_*_batches` value (reference 3.6)."""
    size = length(loader)
    if size is None:
        if isinstance(limit, int):
            return limit
        if limit == 1.0:
            return math.inf
        raise MisconfigurationException(
            f"{flag}={limit!r} (a fraction) needs a loader with a length; give an int number of batches instead"
        )
    if size == 0:
        return 0
    if isinstance(limit, int):
        return min(size, limit)
    batches = int(size * limit)
    if limit > 0 and batches == 0:
        raise MisconfigurationException(
            f"{flag}={limit!r} gives 0 of {size} batches; use at least {1 / size:.4g} or an int"
        )
    return batches


class CombinedTrainLoader:
    """Several training loaders in `max_size_cycle` mode: runs as long as the longest, cycling the others."""

    def __init__(self, loaders: list[Any] | Mapping[str, Any]):
        self.loaders = loaders
        self._items = list(loaders.items()) if isinstance(loaders, Mapping) else list(enumerate(loaders))

    def __len__(self) -> int:
        sizes = [length(loader) for _, loader in self._items]
        if any(size is None for size in sizes):
            raise TypeError("a combined loader with an unsized member has no length")
        return max(sizes)

    def __iter__(self) -> Iterator[Any]:
        iterators = {key: iter(loader) for key, loader in self._items}
        exhausted: set[Any] = set()
        while True:
            batch = {}
            for key, loader in self._items:
                try:
                    batch[key] = next(iterators[key])
                except StopIteration:
                    exhausted.add(key)
                    if len(exhausted) == len(self._items):
                        return
                    iterators[key] = iter(loader)
                    batch[key] = next(iterators[key])
            yield batch if isinstance(self.loaders, Mapping) else [batch[i] for i in range(len(self._items))]


def train_loader(loaders: Any) -> Any:
    if isinstance(loaders, Mapping | list | tuple):
        return CombinedTrainLoader(loaders if isinstance(loaders, Mapping) else list(loaders))
    return loaders


def fetch(
    loader: Iterable[Any],
    num_batches: int | float,
    start: int = 0,
    positioned: Callable[[], None] | None = None,
) -> Iterator[tuple[int, Any, bool]]:
    """Yield `(batch_idx, batch, is_last)`, knowing `is_last` before the batch runs (one batch prefetched).

    A resumed epoch continues its count at `start`. With `positioned`, the `start` batches it already ran are drawn
    from the loader and dropped, and `positioned()` runs once the next batch is in hand, where the saving run stood
    (reference 9.4). Without it the loader starts over and only the remaining number runs (Lightning's rule).
    """
    if num_batches <= start:
        return
    iterator = iter(loader)
    try:
        for _ in range(start if positioned is not None else 0):
            next(iterator)
        upcoming = next(iterator)
    except StopIteration:
        return
    if positioned is not None:
        positioned()
    index = start
    while True:
        if index + 1 >= num_batches:
            yield index, upcoming, True
            return
        try:
            following = next(iterator)
        except StopIteration:
            yield index, upcoming, True
            return
        yield index, upcoming, False
        upcoming = following
        index += 1


_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def transfer(trainer: Any, batch: Any, dataloader_idx: int) -> Any:
    """The three transfer hooks (reference 5, `T`); a DataModule's override wins over the module's."""
    hooks = trainer._hooks
    datamodule = trainer.datamodule
    device = trainer.strategy.root_device
    if datamodule is None and not hooks.module_overrides_any(_TRANSFER_HOOKS):
        return trainer.strategy.batch_to_device(batch, device)  # what the three defaults amount to
    for name in _TRANSFER_HOOKS:
        args = (batch, device, dataloader_idx) if name == "transfer_batch_to_device" else (batch, dataloader_idx)
        if datamodule is not None and is_overridden(name, datamodule, LightningDataModule):
            batch = getattr(datamodule, name)(*args)
        elif name == "transfer_batch_to_device" or hooks.module_overrides(name):
            batch = hooks.module(name, *args)
    return batch


def without_shuffling(loader: Any) -> Any:
    """`overfit_batches` trains on the same first batches every epoch: a shuffling loader becomes sequential."""
    if isinstance(loader, CombinedTrainLoader):
        members = loader.loaders
        if isinstance(members, Mapping):
            return CombinedTrainLoader({key: without_shuffling(value) for key, value in members.items()})
        return CombinedTrainLoader([without_shuffling(value) for value in members])
    if not isinstance(loader, DataLoader) or not isinstance(loader.sampler, RandomSampler):
        return loader
    warnings.warn(
        "overfit_batches > 0: the shuffling loader is replaced by a sequential one", UserWarning, stacklevel=2
    )
    return samplers.rebuild(loader, None, shuffle=False)


def set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Samplers that shuffle per epoch (such as DistributedSampler) learn the epoch before it starts."""
    members = loader.loaders if isinstance(loader, CombinedTrainLoader) else [loader]
    for member in members.values() if isinstance(members, Mapping) else members:
        for sampler in (
            getattr(member, "sampler", None),
            getattr(getattr(member, "batch_sampler", None), "sampler", None),
        ):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
