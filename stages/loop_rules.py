"""The fit loop's stop rules, written once: the machine's `fit_done` guard and the training loop share them.

`fit_done` (in `statemachine.guards`) decides before each epoch whether fit stops; the rules here decide,
after each batch, whether the running epoch ends. Both read `max_steps_reached` and `minimums_met`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.contract import TrainerView

_log = logging.getLogger(__name__)


def minimums_met(trainer: TrainerView) -> bool:
    """`min_epochs` and `min_steps` are met (a falsy minimum always is)."""
    epochs_ok = not trainer.min_epochs or trainer.current_epoch >= trainer.min_epochs
    steps_ok = not trainer.min_steps or trainer.global_step >= trainer.min_steps
    return epochs_ok and steps_ok


def max_steps_reached(trainer: TrainerView) -> bool:
    return trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps


def max_epochs_reached(trainer: TrainerView) -> bool:
    return trainer.max_epochs != -1 and trainer.current_epoch >= trainer.max_epochs


def sigterm_stops_evaluation(trainer: TrainerView) -> bool:
    """After an evaluation batch: a SIGTERM stops the run here in one process. Several ranks stop together at a
    training batch, where the flag is agreed across them, never in the middle of an evaluation."""
    return trainer.received_sigterm and trainer.world_size == 1


def epoch_training_done(trainer: TrainerView) -> bool:
    """After a batch: this epoch has no more training to do (its batches ran out, or max_steps is reached)."""
    loop = trainer.fit_loop
    if loop.is_last_batch or loop.batch_progress.current.ready == loop.num_training_batches:
        return True
    return trainer.max_steps != -1 and max_steps_reached(trainer)  # asked after every batch: no call when unset


def epoch_should_end(trainer: TrainerView) -> bool:
    """After a batch: the epoch ends when its training is done, or on `should_stop` once the minimums are met."""
    if epoch_training_done(trainer):
        return True
    if not trainer.should_stop:
        return False
    if minimums_met(trainer):
        return True
    loop = trainer.fit_loop
    if not loop.told_minimums_wait:
        loop.told_minimums_wait = True
        _log.info(
            "Trainer was signaled to stop but the required `min_epochs=%s` or `min_steps=%s` has not been met. "
            "Training will continue...",
            trainer.min_epochs,
            trainer.min_steps,
        )
    return False
