"""`validation_step`, `test_step` and `predict_step` taking `dataloader_iter`: one iterator over every loader of
the loop in turn, `(batch, batch_idx, dataloader_idx)` as the step fetches them; the step gets the iterator alone.

Hooks around the step follow the same rule as in training: before it, the batch fetched last; after it, the last
batch the step fetched. A step that runs into the end of the data (StopIteration) ends the loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from stages import data
from stages.contract import run_of
from stages.dataloader_iter import DataloaderIter, Fetched
from stages.loop_rules import sigterm_stops_evaluation
from stages.progress import BatchProgress
from stages.training import SIGTERMException

if TYPE_CHECKING:
    from stages.contract import TrainerView


def _fetcher(trainer: TrainerView, loaders: list[Any], counts: list[int | float], kind: str) -> DataloaderIter:
    metrics = run_of(trainer).metrics
    action = f"{kind}_dataloader_next"

    def on_fetch(batch: Any, _: int, dataloader_idx: int) -> None:
        # self.log in the step infers the batch size from, and files its value under, what the step fetched
        if kind != "predict":
            metrics.current_batch = batch
            metrics.dataloader_idx = dataloader_idx

    sources: Iterator[Iterator[Fetched]] = (
        data.fetch(loader, count, profiler=run_of(trainer).profiler, action=action)
        for loader, count in zip(loaders, counts)
    )
    return DataloaderIter(sources, on_fetch)


def _hook_args(fetcher: DataloaderIter, num_loaders: int) -> tuple[Any, ...]:
    if num_loaders > 1:
        return fetcher.batch, fetcher.batch_idx, fetcher.dataloader_idx
    return fetcher.batch, fetcher.batch_idx


def evaluate_fetching(
    trainer: TrainerView,
    noun: str,
    kind: str,
    loaders: list[Any],
    num_batches: list[int | float],
    progress: BatchProgress,
    sanity: bool,
) -> None:
    """The batches of an evaluation loop whose `{noun}_step` takes `dataloader_iter`."""
    hooks = run_of(trainer).hooks
    fetcher = _fetcher(trainer, loaders, num_batches, kind)
    batch_start, step, batch_end = f"on_{noun}_batch_start", f"{noun}_step", f"on_{noun}_batch_end"
    while not fetcher.done:
        progress.increment_ready()
        run_of(trainer).metrics.current_batch = fetcher.batch
        args = _hook_args(fetcher, len(loaders))
        hooks.callbacks(batch_start, *args)
        hooks.module(batch_start, *args)
        progress.increment_started()
        try:
            with trainer.strategy.precision.forward_context():
                output = hooks.module(step, fetcher)
        except StopIteration:
            progress.is_last_batch = True
            return
        progress.increment_processed()
        args = _hook_args(fetcher, len(loaders))
        hooks.callbacks(batch_end, output, *args)
        hooks.module(batch_end, output, *args)
        progress.increment_completed()
        progress.is_last_batch = fetcher.done
        if not sanity:
            run_of(trainer).metrics.step_end(kind, None, True)
        if sigterm_stops_evaluation(trainer) and not fetcher.done:
            raise SIGTERMException()


def predict_fetching(
    trainer: TrainerView, loaders: list[Any], counts: list[int | float], outputs: list[list[Any]], keep: bool
) -> None:
    """The batches of the predict loop when `predict_step` takes `dataloader_iter`; each prediction is kept
    under the loader of the last batch the step fetched."""
    hooks = run_of(trainer).hooks
    progress = trainer.predict_progress
    fetcher = _fetcher(trainer, loaders, counts, "predict")
    while not fetcher.done:
        progress.increment_ready()
        args = _hook_args(fetcher, len(loaders))
        hooks.callbacks("on_predict_batch_start", *args)
        hooks.module("on_predict_batch_start", *args)
        progress.increment_started()
        try:
            with trainer.strategy.precision.forward_context():
                prediction = hooks.module("predict_step", fetcher)
        except StopIteration:
            return
        progress.increment_processed()
        args = _hook_args(fetcher, len(loaders))
        hooks.callbacks("on_predict_batch_end", prediction, *args)
        hooks.module("on_predict_batch_end", prediction, *args)
        progress.increment_completed()
        if keep:
            outputs[fetcher.dataloader_idx].append(prediction)
