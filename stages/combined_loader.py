"""CombinedLoader: several iterables (a dict, list or tuple of loaders, nested as you like) iterated together.

Iterating yields `(batch, batch_idx, dataloader_idx)`. The mode says how the iterables are combined:

- `min_size`: one batch from each per step, in the collection's structure; stops when the shortest is exhausted.
- `max_size_cycle`: as `min_size`, but runs as long as the longest; shorter iterables start over when exhausted.
- `max_size`: runs as long as the longest; an exhausted iterable contributes `None`.
- `sequential`: the iterables one after the other; `batch_idx` restarts and `dataloader_idx` names the iterable.

`limits` caps each iterable's number of batches (the Trainer's `limit_*_batches` are applied per iterable).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils._pytree import tree_flatten, tree_unflatten

MODES = ("min_size", "max_size_cycle", "max_size", "sequential")


def length(iterable: Any) -> int | None:
    """`len(iterable)`, or None for an iterable without a length."""
    try:
        return len(iterable)
    except (TypeError, NotImplementedError):
        return None


class CombinedLoader(Iterable[Any]):
    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in MODES:
            raise ValueError(f"CombinedLoader mode {mode!r} is not one of {', '.join(map(repr, MODES))}")
        self._iterables = iterables
        self._flattened, self._spec = tree_flatten(iterables)
        self._mode = mode
        self._limits: list[int | float] | None = None
        self._iterator: Iterator[tuple[Any, int, int]] | None = None

    @property
    def iterables(self) -> Any:
        """The collection of iterables as it was given."""
        return self._iterables

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def flattened(self) -> list[Any]:
        """The iterables in a flat list, in the order `dataloader_idx` counts them."""
        return self._flattened

    @flattened.setter
    def flattened(self, flattened: list[Any]) -> None:
        if len(flattened) != len(self._flattened):
            raise ValueError(
                f"CombinedLoader.flattened must keep its {len(self._flattened)} iterables; got {len(flattened)}"
            )
        self._iterables = tree_unflatten(list(flattened), self._spec)
        self._flattened = list(flattened)

    @property
    def limits(self) -> list[int | float] | None:
        return self._limits

    @limits.setter
    def limits(self, limits: int | float | list[int | float] | None) -> None:
        if limits is None or isinstance(limits, int | float):
            self._limits = None if limits is None else [limits] * len(self._flattened)
            return
        if len(limits) != len(self._flattened):
            raise ValueError(
                f"CombinedLoader.limits has {len(limits)} values for {len(self._flattened)} iterables; give one each"
            )
        self._limits = list(limits)

    @property
    def sampler(self) -> Any:
        """Each iterable's `sampler` (None where it has none), in the collection's structure."""
        return tree_unflatten([getattr(it, "sampler", None) for it in self._flattened], self._spec)

    @property
    def batch_sampler(self) -> Any:
        return tree_unflatten([getattr(it, "batch_sampler", None) for it in self._flattened], self._spec)

    def _sizes(self) -> list[int | float]:
        """Batches each iterable gives under the limits; unknown (an unsized iterable, no limit) is inf."""
        sizes: list[int | float] = []
        for index, iterable in enumerate(self._flattened):
            size = length(iterable)
            bound: int | float = math.inf if size is None else size
            if self._limits is not None:
                bound = min(bound, self._limits[index])
            sizes.append(bound)
        return sizes

    @property
    def num_batches(self) -> int | float:
        """Steps one pass takes (inf when an unsized iterable decides it)."""
        sizes = self._sizes()
        if not sizes:
            return 0
        if self._mode == "min_size":
            return min(sizes)
        if self._mode == "sequential":
            return sum(sizes)
        return max(sizes)

    def __len__(self) -> int:
        total = self.num_batches
        if total == math.inf:
            raise TypeError("this CombinedLoader has no length: an iterable without a length and without a limit")
        return int(total)

    def __iter__(self) -> CombinedLoader:
        self._iterator = getattr(self, f"_iterate_{self._mode}")()
        return self

    def __next__(self) -> tuple[Any, int, int]:
        if self._iterator is None:
            raise RuntimeError("call iter(combined_loader) before next()")
        return next(self._iterator)

    def reset(self) -> None:
        """Drop the running iteration (a loader's worker processes go with its iterator)."""
        self._iterator = None

    def batches(self) -> Iterator[Any]:
        """Only the batches of a fresh pass, without the indices: what a training or evaluation step receives."""
        for batch, _, _ in iter(self):
            yield batch

    # ---- the modes ----

    def _iterate_sequential(self) -> Iterator[tuple[Any, int, int]]:
        for dataloader_idx, (iterable, size) in enumerate(zip(self._flattened, self._sizes())):
            if size == 0:
                continue
            for batch_idx, batch in enumerate(iterable):
                yield batch, batch_idx, dataloader_idx
                if batch_idx + 1 >= size:
                    break

    def _iterate_min_size(self) -> Iterator[tuple[Any, int, int]]:
        total = self.num_batches
        if total == 0:
            return
        iterators = [iter(iterable) for iterable in self._flattened]
        batch_idx = 0
        while batch_idx < total:
            try:
                batches = [next(iterator) for iterator in iterators]
            except StopIteration:
                return
            yield tree_unflatten(batches, self._spec), batch_idx, 0
            batch_idx += 1

    def _iterate_max_size_cycle(self) -> Iterator[tuple[Any, int, int]]:
        sizes = self._sizes()
        if not sizes or min(sizes) == 0:
            return  # an empty iterable cannot be cycled
        iterators = [iter(iterable) for iterable in self._flattened]
        drawn = [0] * len(iterators)
        exhausted = [False] * len(iterators)
        batch_idx = 0
        while True:
            batches = []
            for index, iterable in enumerate(self._flattened):
                batch = self._draw(iterators, drawn, index, sizes[index])
                if batch is _EXHAUSTED:
                    exhausted[index] = True
                    if all(exhausted):
                        return
                    iterators[index], drawn[index] = iter(iterable), 0
                    batch = self._draw(iterators, drawn, index, sizes[index])
                batches.append(batch)
            yield tree_unflatten(batches, self._spec), batch_idx, 0
            batch_idx += 1

    def _iterate_max_size(self) -> Iterator[tuple[Any, int, int]]:
        sizes = self._sizes()
        iterators = [iter(iterable) for iterable in self._flattened]
        drawn = [0] * len(iterators)
        done = [size == 0 for size in sizes]
        batch_idx = 0
        while not all(done):
            batches = []
            for index in range(len(iterators)):
                batch = None if done[index] else self._draw(iterators, drawn, index, sizes[index])
                if batch is _EXHAUSTED:
                    done[index], batch = True, None
                batches.append(batch)
            if all(done):
                return
            yield tree_unflatten(batches, self._spec), batch_idx, 0
            batch_idx += 1

    @staticmethod
    def _draw(iterators: list[Iterator[Any]], drawn: list[int], index: int, size: int | float) -> Any:
        """The next batch of iterable `index`, or `_EXHAUSTED` once it ran out or reached its limit."""
        if drawn[index] >= size:
            return _EXHAUSTED
        try:
            batch = next(iterators[index])
        except StopIteration:
            return _EXHAUSTED
        drawn[index] += 1
        return batch


_EXHAUSTED = object()
