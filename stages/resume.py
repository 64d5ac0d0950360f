"""Where a restored fit continues: the named resume points, and what each one restores.

A checkpoint's loop counters say where inside the fit it was saved. `classify` names that place; `settle`
brings the counters to the state the run continues from, one rule per point. The machine's guards read the
point (a resume inside an epoch runs no sanity check and continues that epoch), and the fit edge's history
record names it.
"""

from __future__ import annotations

from enum import Enum

from stages.progress import BatchProgress, Progress


class ResumePoint(str, Enum):
    FRESH = "fresh start"
    EPOCH_BOUNDARY = "epoch boundary"
    MID_EPOCH = "mid-epoch"
    IN_VALIDATION = "inside an in-fit validation"
    IN_LAST_VALIDATION = "inside the validation after an epoch's last batch"
    FIT_DONE = "after a finished fit"

    def __str__(self) -> str:
        return self.value


INSIDE_EPOCH = frozenset({ResumePoint.MID_EPOCH, ResumePoint.IN_VALIDATION, ResumePoint.IN_LAST_VALIDATION})
"""Saved before the epoch ended: no sanity check runs."""
CONTINUES_EPOCH = frozenset({ResumePoint.MID_EPOCH, ResumePoint.IN_VALIDATION})
"""Training continues the saved epoch at its next batch, without `on_train_epoch_start`."""


def classify(epoch: Progress, batch: BatchProgress, val: BatchProgress, max_steps: int) -> ResumePoint:
    """Name the place a checkpoint was saved from its (already loaded) counters.

    Lightning counts a save as a restart when its epoch was unfinished or `max_steps` is set; only a restart
    continues inside the saved epoch, and only if the epoch's last batch had not run. `FIT_DONE` is told apart
    from `EPOCH_BOUNDARY` by the trainer's limits, after `settle`.
    """
    counts = epoch.current
    inside_epoch = counts.processed == counts.started - 1
    epoch_end_ran = counts.ready == counts.started == counts.processed and counts.completed == counts.processed - 1
    restart = inside_epoch or max_steps != -1
    continues = restart and (inside_epoch or epoch_end_ran) and not batch.is_last_batch
    in_validation = val.current.processed == val.current.started - 1
    if in_validation:
        return ResumePoint.IN_VALIDATION if continues else ResumePoint.IN_LAST_VALIDATION
    if continues:
        return ResumePoint.MID_EPOCH
    return ResumePoint.EPOCH_BOUNDARY


def step_uncounted(epoch: Progress, batch: BatchProgress, max_steps: int, accumulate_grad_batches: int) -> bool:
    """Whether the save came after a batch that stepped, before the loop counted that step for logging (the
    logging step, `_batches_that_stepped`, goes up after the batch-end hooks and the batch's validation), so the
    restored count is one short. Read before `settle`; Lightning's rule: a restart that was not saved at the
    epoch's end, unless saved from `on_train_batch_end`."""
    counts = epoch.current
    inside_epoch = counts.processed == counts.started - 1
    epoch_end_ran = counts.ready == counts.started == counts.processed and counts.completed == counts.processed - 1
    if not (inside_epoch or max_steps != -1):
        return False
    saved_after_batch_end = batch.current.completed == batch.current.processed - 1
    if epoch_end_ran and not saved_after_batch_end:
        return False
    position = batch.current.ready  # the saved batch, 1-based in its epoch
    return position > 0 and (position % accumulate_grad_batches == 0 or batch.is_last_batch)


def settle(point: ResumePoint, epoch: Progress, batch: BatchProgress) -> None:
    """Bring the counters to where the run continues from `point`."""
    if batch.current.completed == batch.current.processed - 1:
        batch.increment_completed()  # saved from on_train_batch_end: that batch is done
    counts = epoch.current
    if point in CONTINUES_EPOCH:
        if counts.processed == counts.started:
            # A max_steps stop ran this epoch's end early; it is processed again when the epoch really ends.
            counts.processed -= 1
            epoch.total.processed -= 1
        return
    if counts.processed == counts.started - 1:
        epoch.increment_processed()  # saved from the epoch's last batch: that epoch is over
    if counts.completed == counts.processed - 1:
        epoch.increment_completed()
    batch.reset_current()
