"""Step methods that take `dataloader_iter`: the step fetches its own batches (to prefetch or fetch several).

The step is called with one iterator of `(batch, batch_idx, dataloader_idx)` instead of a batch, and nothing is
moved to the device for it. The loop counts step calls; the epoch ends once the data has run out. The batch
hooks before the step see the batch fetched last (None before the first fetch), those after it the last batch
the step fetched. A step that runs into the end of the data (StopIteration) ends the epoch: it gets no batch-end
hooks, but still counts as the epoch's last batch, so its end-of-epoch validation runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

ITERATOR_PARAMETER = "dataloader_iter"

Fetched = tuple[int, Any, bool]  # (batch_idx, batch, is_last) as `data.fetch` yields them


def takes_dataloader_iter(step: Any) -> bool:
    """Whether a step method asks for the iterator: it has a parameter named `dataloader_iter`."""
    try:
        return ITERATOR_PARAMETER in inspect.signature(step).parameters
    except (TypeError, ValueError):
        return False


class DataloaderIter(Iterator[tuple[Any, int, int]]):
    """The `dataloader_iter` a step receives: every source's batches in turn, as `(batch, batch_idx,
    dataloader_idx)`. It remembers the batch it handed out last and knows when the data has run out (`done`)
    as soon as the last batch is handed out, without fetching further within a source."""

    def __init__(self, sources: Iterator[Iterator[Fetched]], on_fetch: Callable[[Any, int, int], None]) -> None:
        self._sources = enumerate(sources)
        self._on_fetch = on_fetch
        self._batches: Iterator[Fetched] = iter(())
        self._source_idx = 0
        self._pending: Fetched | None = None
        self.batch: Any = None
        self.batch_idx = 0
        self.dataloader_idx = 0
        self.done = False
        self._open_next_source()

    def _open_next_source(self) -> None:
        """Hold the first batch of the next source that has one; done when none has."""
        for source_idx, batches in self._sources:
            first = next(batches, None)
            if first is not None:
                self._batches, self._source_idx, self._pending = batches, source_idx, first
                return
        self.done = True

    def __next__(self) -> tuple[Any, int, int]:
        if self.done:
            raise StopIteration
        if self._pending is not None:
            fetched, self._pending = self._pending, None
        else:
            fetched = next(self._batches)  # not the source's last yet, so it has another
        batch_idx, batch, is_last = fetched
        self.batch, self.batch_idx, self.dataloader_idx = batch, batch_idx, self._source_idx
        self._on_fetch(batch, batch_idx, self._source_idx)
        if is_last:
            self._open_next_source()
        return batch, batch_idx, self.dataloader_idx


# ---- training -------------------------------------------------------------------------------------------
