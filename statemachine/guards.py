"""Guards: pure, cheap predicates over the run in flight. The machine evaluates them to choose an edge.

A guard returns a truthy value to pass. `fit_done` returns the reason fit stops (a string), so the history
record of the stop says why, the way Lightning's fit loop logs it. The training loop's per-batch rules
(`stages.loop_rules`) share their pieces with `fit_done`, so each stop condition is written once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from stages.loop_rules import max_epochs_reached, max_steps_reached, minimums_met
from stages.resume import CONTINUES_EPOCH, INSIDE_EPOCH

if TYPE_CHECKING:
    from statemachine.run import Run


def resumes_inside_epoch(run: Run) -> bool:
    """The restored checkpoint was saved inside an epoch (or inside one of its validations)."""
    return run.fit_loop.resume_point in INSIDE_EPOCH


def resumes_mid_epoch(run: Run) -> bool:
    """The restored checkpoint continues its epoch at the next batch (saved mid-epoch, or inside one of the
    epoch's validations before its last batch)."""
    return run.fit_loop.resume_point in CONTINUES_EPOCH


def should_sanity_check(run: Run) -> bool:
    """Validation is enabled and sanity steps are requested."""
    trainer = run.trainer
    return trainer.enable_validation and trainer.num_sanity_val_steps != 0


def needs_val_loaders(run: Run) -> bool:
    """The epoch training starts with validates, and no validation loader was requested in this fit yet (no
    sanity check ran)."""
    loop = run.fit_loop
    return loop.epoch_validates_at(loop.current_epoch) and run.fit_validation.needs_loaders


SHOULD_STOP = "`trainer.should_stop` was set"
TRAINING_OFF = "`limit_train_batches=0`"


def fit_done(run: Run) -> str | None:
    """Lightning's stop conditions, checked before each epoch; the first that holds is the reason, in the words
    Lightning's fit loop logs."""
    trainer = run.trainer
    if trainer.limit_train_batches == 0:
        return TRAINING_OFF
    if trainer.fit_loop.num_training_batches == 0:
        return "No training batches"
    if max_steps_reached(trainer):
        return f"`max_steps={trainer.max_steps}` reached"
    if max_epochs_reached(trainer):
        return f"`max_epochs={trainer.max_epochs}` reached"
    if trainer.should_stop and minimums_met(trainer):
        return SHOULD_STOP + (" (max_time reached)" if _out_of_time(run) else "")
    return None


def _out_of_time(run: Run) -> bool:
    from stages.callbacks.timer import Timer  # only when fit stops: keeps this module free of torch

    remaining = [c.time_remaining() for c in run.callbacks if isinstance(c, Timer)]
    return any(seconds is not None and seconds <= 0 for seconds in remaining)


# Whether validation runs after the batch that just finished: Lightning's rules, one guard each, so the diagram and the
# history show which one scheduled a validation. The machine asks them in the table's order; the first that passes
# decides, so a later guard never repeats what an earlier one covers.


def epoch_validates(run: Run) -> bool:
    """The running epoch validates: decided at its start, it holds for the whole epoch."""
    return run.fit_loop.epoch_validates


def validates_at_epoch_end(run: Run) -> bool:
    """The epoch's last batch ran, and its end is not counted in batches: the loader has no length, or the step
    fetches its own batches (with a length, `val_batches_counted` counts up to the epoch's end)."""
    loop = run.fit_loop
    return loop.epoch_validates and loop.is_last_batch and (loop.val_check_batch == math.inf or loop.fetches_itself)


def validates_before_stop(run: Run) -> bool:
    """`should_stop` is set and the minimums are met: the epoch validates once more before fit stops (an early
    or `max_time` stop)."""
    trainer = run.trainer
    return run.fit_loop.epoch_validates and trainer.should_stop and minimums_met(trainer)


def val_time_elapsed(run: Run) -> bool:
    """Validation is scheduled by time (`val_check_interval` a duration) and the interval has passed (agreed across
    ranks in a multi-process run)."""
    loop = run.fit_loop
    return loop.epoch_validates and loop.val_check_batch is None and loop.time_for_validation()


def val_batches_counted(run: Run) -> bool:
    """The `val_check_interval`-th batch since the last validation ran: counted in the epoch, or over the whole run
    with `check_val_every_n_epoch=None`."""
    loop = run.fit_loop
    val_check_batch = loop.val_check_batch
    if not loop.epoch_validates or val_check_batch is None:
        return False
    if val_check_batch == math.inf:
        limit = run.trainer.limit_train_batches
        return isinstance(limit, int) and (loop.batch_idx + 1) % limit == 0
    index = loop.total_batch_idx if run.trainer.check_val_every_n_epoch is None else loop.batch_idx
    return (index + 1) % val_check_batch == 0
