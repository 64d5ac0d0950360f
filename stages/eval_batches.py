"""The batch sequence of the evaluation and predict loops, one for every kind of step.

A step method takes a batch (`validation_step(batch, batch_idx[, dataloader_idx])`), or it takes `dataloader_iter`:
one iterator over every loader of the loop in turn, `(batch, batch_idx, dataloader_idx)` as the step fetches them,
which the step gets alone. Both run through `run_batches`; only where a call's input comes from differs (`calls`).
The hooks around a fetching step follow the rule of training: before it, the batch fetched last; after it, the last
batch the step fetched. A step that runs into the end of the data (StopIteration) ends the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from stages import data
from stages.contract import run_of
from stages.dataloader_iter import DataloaderIter

if TYPE_CHECKING:
    from stages.contract import TrainerView
    from stages.progress import BatchProgress

# One step call: (batch_idx, dataloader_idx, the step's input, whether it is its loader's last batch).
Call = tuple[int, int, Any, bool]
# Per kind of loop: what it does with a call's batch before the hooks, and with the step's output after them.
Before = Callable[[Any, int, int], None]
After = Callable[[Any, int, bool], None]


def calls(
    trainer: TrainerView, loaders: list[Any], counts: list[int | float], kind: str, fetching: bool
) -> Iterator[Call]:
    """Every loader's batches in turn, or, for a step that fetches its own, one `dataloader_iter` over all of them
    (yielded once per step call: whether a call fetches the last batch shows only after it)."""
    action = f"{kind}_dataloader_next"
    profiler = run_of(trainer).profiler
    sources = (data.fetch(loader, count, profiler=profiler, action=action) for loader, count in zip(loaders, counts))
    if not fetching:
        for dataloader_idx, batches in enumerate(sources):
            for batch_idx, batch, is_last in batches:
                yield batch_idx, dataloader_idx, batch, is_last
        return
    fetcher = DataloaderIter(sources, _on_fetch(trainer, kind))
    while not fetcher.done:
        yield fetcher.batch_idx, fetcher.dataloader_idx, fetcher, False


def _on_fetch(trainer: TrainerView, kind: str) -> Callable[[Any, int, int], None]:
    metrics = run_of(trainer).metrics

    def on_fetch(batch: Any, _: int, dataloader_idx: int) -> None:
        # self.log in the step infers the batch size from, and files its value under, what the step fetched
        if kind != "predict":
            metrics.current_batch = batch
            metrics.dataloader_idx = dataloader_idx

    return on_fetch


def run_batches(
    trainer: TrainerView,
    hook_names: tuple[str, str, str],
    batch_calls: Iterator[Call],
    fetching: bool,
    num_loaders: int,
    progress: BatchProgress,
    before: Before,
    after: After,
) -> None:
    """Each call with its batch hooks and progress, in Lightning's order: `before`, the start hooks, the step (in
    the precision's forward context), the end hooks, then `after` with the output."""
    hooks = run_of(trainer).hooks
    batch_start, step, batch_end = hook_names
    transfer = data.transfer_for(trainer)
    forward_context = trainer.strategy.precision.forward_context
    for batch_idx, dataloader_idx, item, is_last in batch_calls:
        progress.increment_ready()
        batch = item.batch if fetching else transfer(item, dataloader_idx)
        before(batch, batch_idx, dataloader_idx)
        args = (batch, batch_idx, dataloader_idx) if num_loaders > 1 else (batch, batch_idx)
        hooks.callbacks(batch_start, *args)
        hooks.module(batch_start, *args)
        progress.increment_started()
        try:
            with forward_context():
                output = hooks.module(step, *((item,) if fetching else args))
        except StopIteration:
            if not fetching:
                raise
            progress.is_last_batch = True
            return
        progress.increment_processed()
        if fetching:
            batch_idx, dataloader_idx, is_last = item.batch_idx, item.dataloader_idx, item.done
            args = (item.batch, batch_idx, dataloader_idx) if num_loaders > 1 else (item.batch, batch_idx)
        hooks.callbacks(batch_end, output, *args)
        hooks.module(batch_end, output, *args)
        progress.increment_completed()
        progress.is_last_batch = is_last
        after(output, dataloader_idx, is_last)
