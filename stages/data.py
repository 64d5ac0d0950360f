"""Dataloaders: where they come from, how many batches each gives, and how batches are fetched."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader, RandomSampler

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
    if given is not None:
        return given
    hook = f"{kind}_dataloader"
    if trainer.datamodule is not None:
        return trainer._hooks.datamodule(hook)
    return trainer._hooks.module(hook)


def check_argument(method: str, name: str, value: Any) -> None:
    """Refuse a `*dataloaders` argument that is not a loader, an iterable of batches, or a collection of them.

    A string is refused, not iterated: `"data.csv"` would otherwise train on its characters.
    """
    if value is None or isinstance(value, LightningDataModule):
        return
    if isinstance(value, Mapping):
        members: list[tuple[str, Any]] = [(f"{name}[{key!r}]", member) for key, member in value.items()]
    elif isinstance(value, list | tuple):
        members = [(f"{name}[{index}]", member) for index, member in enumerate(value)]
    else:
        members = [(name, value)]
    for shown, member in members:
        if isinstance(member, str | bytes) or not _iterable(member):
            why = "a path or text is not loaded for you" if isinstance(member, str | bytes) else "it is not iterable"
            raise TypeError(
                f"Trainer.{method}({shown}={member!r}) is not a dataloader ({type(member).__name__}: {why}); pass a "
                "torch.utils.data.DataLoader or another iterable of batches, a list, tuple or dict of them, or a "
                "LightningDataModule"
            )


def _iterable(value: Any) -> bool:
    # No iter() call: on a DataLoader with workers it would start them.
    return hasattr(value, "__iter__") or hasattr(value, "__getitem__")


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


def warn_if_no_training_batches(loader: Any, num_batches: int | float) -> None:
    """An empty training loader makes fit "finish" without a single step; say so, and why."""
    if num_batches != 0:
        return
    reason = "it has no batches"
    if isinstance(loader, DataLoader):
        samples = length(loader.dataset)
        if samples == 0:
            reason = "its dataset is empty"
        elif loader.drop_last and samples is not None and loader.batch_size and samples < loader.batch_size:
            reason = f"drop_last=True drops its only batch ({samples} samples, batch_size={loader.batch_size})"
    warnings.warn(
        f"The training dataloader is empty ({reason}): no training step will run, so fit leaves the model as it is",
        UserWarning,
        stacklevel=3,
    )


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
    options: dict[str, Any] = {
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
    }
    if loader.num_workers > 0:
        options.update(
            prefetch_factor=loader.prefetch_factor,
            persistent_workers=loader.persistent_workers,
            multiprocessing_context=loader.multiprocessing_context,
        )
    return DataLoader(loader.dataset, shuffle=False, **options)


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
