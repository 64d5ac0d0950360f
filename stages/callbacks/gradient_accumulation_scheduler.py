"""GradientAccumulationScheduler: change `accumulate_grad_batches` as training goes through epochs."""

from __future__ import annotations

import warnings
from typing import Any

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.hooks import is_overridden
from stages.module import LightningModule


class GradientAccumulationScheduler(Callback):
    """`scheduling` maps a (0-based) epoch to the accumulation factor used from that epoch on, e.g.
    `{0: 8, 4: 4, 8: 1}`; epochs before the first key accumulate 1 batch. At each epoch start the factor is set
    on `trainer.accumulate_grad_batches`. Needs automatic optimization and `Trainer(accumulate_grad_batches=1)`."""

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not scheduling:
            raise TypeError("GradientAccumulationScheduler needs a non-empty scheduling dict {epoch: factor}")
        bad_epochs = [key for key in scheduling if not _is_int(key) or key < 0]
        if bad_epochs:
            raise MisconfigurationException(
                f"scheduling epochs must be ints >= 0; got {list(scheduling)} (bad: {bad_epochs})"
            )
        bad_factors = [value for value in scheduling.values() if not _is_int(value) or value < 1]
        if bad_factors:
            raise MisconfigurationException(
                f"accumulation factors must be ints >= 1; got {list(scheduling.values())} (bad: {bad_factors})"
            )
        self.scheduling = dict(scheduling)
        self.scheduling.setdefault(0, 1)
        self.epochs = sorted(self.scheduling)

    def going_to_accumulate_grad_batches(self) -> bool:
        return any(factor > 1 for factor in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        return self.scheduling[max(start for start in self.epochs if start <= epoch)]

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError(
                "GradientAccumulationScheduler needs automatic optimization; remove the callback or set "
                "automatic_optimization = True"
            )
        hooks = ("optimizer_step", "optimizer_zero_grad")
        custom = [name for name in hooks if is_overridden(name, pl_module, LightningModule)]
        if custom and self.going_to_accumulate_grad_batches():
            warnings.warn(
                f"With gradient accumulation, the overridden LightningModule.{', '.join(custom)} is called on every "
                "optimizer step, not on every batch",
                TrainerWarning,
                stacklevel=2,
            )
        if trainer.accumulate_grad_batches != 1:
            raise ValueError(
                f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}) and a "
                "GradientAccumulationScheduler both set the accumulation: remove one of them"
            )
        # a fit resumed mid-epoch gets no epoch-start hook for that epoch
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
