"""Which dataset indices each batch of a DataLoader holds, recorded as its batch sampler hands them out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset


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
    return DataLoader(loader.dataset, batch_sampler=recorder, **options), recorder
