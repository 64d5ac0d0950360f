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
from typing import TYPE_CHECKING, Any

from stages.contract import run_of

if TYPE_CHECKING:
    from stages.training import FitLoop

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


def training_steps(loop: FitLoop, batches: Iterator[Fetched], start: int) -> Iterator[tuple[int, DataloaderIter]]:
    """The epoch's step calls (index, the iterator the step gets), each run by `run_training_step`. `batches`
    start at the loader position `start`; the loop keeps the position, which a mid-epoch checkpoint saves."""
    metrics = run_of(loop.trainer).metrics
    loop.fetched_in_epoch = start

    def on_fetch(batch: Any, batch_idx: int, _: int) -> None:
        metrics.current_batch = batch  # self.log infers the batch size from the batch the step fetched
        loop.fetched_in_epoch = batch_idx + 1

    fetcher = DataloaderIter(iter((batches,)), on_fetch)
    return _step_calls(fetcher, loop.batch_progress.current.completed)


def _step_calls(fetcher: DataloaderIter, start: int) -> Iterator[tuple[int, DataloaderIter]]:
    step_idx = start
    while not fetcher.done:
        yield step_idx, fetcher
        step_idx += 1


def run_training_step(loop: FitLoop, step_idx: int, fetcher: DataloaderIter) -> bool:
    """One `training_step(dataloader_iter)` with its batch hooks; False when `on_train_batch_start` returned -1.
    The loop's own counters (accumulation, schedulers, `val_check_interval`) count step calls."""
    trainer = loop.trainer
    progress = loop.batch_progress
    is_last = False  # whether this step fetches the last batch shows only after it
    loop.batch_idx, loop.is_last_batch = step_idx, is_last
    progress.increment_ready()
    progress.is_last_batch = is_last
    run_of(trainer).metrics.current_batch = fetcher.batch
    if loop._batch_start_ends_epoch(fetcher.batch, fetcher.batch_idx):
        loop.is_last_batch = True
        return False
    progress.increment_started()
    loop.stepped_this_batch = False
    ran_out = False
    try:
        if loop.automatic:
            outputs = loop.batch_outputs(*loop._automatic_step(fetcher, step_idx, is_last))
        else:
            outputs = loop.batch_outputs(loop._manual_step(fetcher, step_idx), None)
    except StopIteration:
        ran_out = True
    loop.is_last_batch = progress.is_last_batch = fetcher.done or ran_out
    progress.increment_processed()
    loop._step_schedulers(step_idx, loop.is_last_batch)
    if ran_out and loop.automatic:
        # The epoch ends on a step that did not step the optimizer: its epoch-interval schedulers still step once.
        run_of(trainer).optimization.step_schedulers("epoch", loop.current_epoch + 1, plateau=False)
    if not ran_out:
        loop._batch_end(outputs, fetcher.batch, fetcher.batch_idx)
    progress.increment_completed()
    run_of(trainer).metrics.step_end("train", loop.batches_that_stepped, loop._should_log())
    return True
