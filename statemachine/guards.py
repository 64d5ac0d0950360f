"""Guards: pure, cheap predicates over the trainer. The machine evaluates them to choose an edge; the stage
handlers call the same functions directly per batch, so the table and the loops cannot disagree."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statemachine.trainer import Trainer


def should_sanity_check(trainer: Trainer) -> bool:
    """Validation is enabled, sanity steps are requested, and fit does not resume inside a validation."""
    loop = trainer.fit_loop
    return trainer.enable_validation and trainer.num_sanity_val_steps != 0 and not loop.resuming_in_validation


def minimums_met(trainer: Trainer) -> bool:
    epochs_ok = not trainer.min_epochs or trainer.current_epoch >= trainer.min_epochs
    steps_ok = not trainer.min_steps or trainer.global_step >= trainer.min_steps
    return epochs_ok and steps_ok


def fit_done(trainer: Trainer) -> bool:
    """Lightning's stop conditions, checked before each epoch (reference 3.2)."""
    if trainer.fit_loop.num_training_batches == 0:
        return True
    if trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
        return True
    if trainer.max_epochs != -1 and trainer.current_epoch >= trainer.max_epochs:
        return True
    return trainer.should_stop and minimums_met(trainer)


def should_check_val(trainer: Trainer) -> bool:
    """Whether validation runs after the batch that just finished (reference 3.3, first matching rule)."""
    loop = trainer.fit_loop
    if not loop.epoch_validates:
        return False
    is_last = loop.is_last_batch
    val_check_batch = loop.val_check_batch
    if is_last and val_check_batch == float("inf"):
        return True
    if trainer.should_stop and minimums_met(trainer):
        return True
    if val_check_batch is None:  # time-based: there is no automatic end-of-epoch run
        return time.monotonic() - loop.last_val_end_time >= loop.val_check_seconds
    if isinstance(trainer.limit_train_batches, int) and val_check_batch == float("inf"):
        return (loop.batch_idx + 1) % trainer.limit_train_batches == 0
    if val_check_batch != float("inf"):
        index = loop.total_batch_idx if trainer.check_val_every_n_epoch is None else loop.batch_idx
        return (index + 1) % val_check_batch == 0
    return is_last


GUARDS: dict[str, Callable[[Trainer], bool]] = {
    "should_sanity_check": should_sanity_check,
    "should_check_val": should_check_val,
    "fit_done": fit_done,
}
