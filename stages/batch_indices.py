"""Which dataset indices each batch of a DataLoader holds, recorded as its batch sampler hands them out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from stages import samplers


class RecordingBatchSampler:
    """Passes a batch sampler's batches through and keeps them, in order, for the iteration in progress."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)
        self.seen: list[list[Any]] = []

    def __iter__(self) -> Iterator[Any]:
        self.seen = []
        for batch in self.batch_sampler:
            self.seen.append(list(batch))
            yield batch

    def __len__(self) -> int:
        return len(self.batch_sampler)


def recording(loader: Any) -> tuple[Any, RecordingBatchSampler | None]:
    """The same loader rebuilt around a recording batch sampler; unchanged (and None) when it has no sampler
    to record, such as an iterable dataset or a loader that is not a torch DataLoader."""
    if not isinstance(loader, DataLoader) or loader.batch_sampler is None:
        return loader, None
    if isinstance(loader.dataset, IterableDataset):  # its batch sampler only counts, it does not index
        return loader, None
    recorder = RecordingBatchSampler(loader.batch_sampler)
    return DataLoader(loader.dataset, batch_sampler=recorder, **samplers.loader_options(loader)), recorder
