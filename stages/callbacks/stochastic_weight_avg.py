"""StochasticWeightAveraging: average the weights of the last epochs, with an SWA learning-rate schedule."""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import SWALR

from stages import data
from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.optimization import LRSchedulerConfig

_log = logging.getLogger(__name__)

AverageFn = Callable[[Tensor, Tensor, Tensor], Tensor]
_CPU = torch.device("cpu")


class StochasticWeightAveraging(Callback):
    """From epoch `swa_epoch_start` (an int >= 1 counted from 1, or a fraction of `max_epochs`) to the last
    epoch, each epoch start adds the current weights to a running average (`avg_fn`, the mean by default) and
    the learning rate follows `torch.optim.swa_utils.SWALR` towards `swa_lrs`, annealed over `annealing_epochs`
    with `annealing_strategy` ("cos" or "linear"). When training ends the model gets the averaged weights; a
    model with BatchNorm then gets its running statistics recomputed in train mode over one pass of the
    training data, with no optimizer steps. The average is kept on `device` (None: the model's device)."""

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AverageFn | None = None,
        device: torch.device | str | None = _CPU,
    ) -> None:
        _check_arguments(swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy, avg_fn, device)
        self.n_averaged: Tensor | None = None
        self._swa_epoch_start = swa_epoch_start
        self._swa_lrs = swa_lrs
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn = avg_fn or self.avg_fn
        self._device = device
        self._model_contains_batch_norm = False
        self._average_model: nn.Module | None = None
        self._initialized = False
        self._swa_scheduler: SWALR | None = None
        self._scheduler_state: dict[str, Any] | None = None
        self._init_n_averaged = 0
        self._latest_update_epoch = -1
        self._max_epochs = 0
        self.momenta: dict[_BatchNorm, float | None] = {}

    @property
    def swa_start(self) -> int:
        """The first averaging epoch, 0-based."""
        return max(int(self._swa_epoch_start) - 1, 0)

    @property
    def swa_end(self) -> int:
        return self._max_epochs - 1

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: nn.Module) -> bool:
        return any(isinstance(module, _BatchNorm) for module in pl_module.modules())

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        # the copy must not drag the trainer along
        self._average_model = copy.deepcopy(pl_module, memo={id(pl_module._trainer): None})

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfigurationException(f"SWA works with 1 optimizer; got {len(trainer.optimizers)}")
        if len(trainer.lr_scheduler_configs) > 1:
            raise MisconfigurationException(
                f"SWA works with at most 1 lr scheduler; got {len(trainer.lr_scheduler_configs)}"
            )
        if trainer.max_epochs is None or trainer.max_epochs < 1:
            raise MisconfigurationException(
                f"SWA needs Trainer(max_epochs=N) to know its last epoch; got max_epochs={trainer.max_epochs}"
            )
        if isinstance(self._swa_epoch_start, float):
            self._swa_epoch_start = int(trainer.max_epochs * self._swa_epoch_start)
        self._model_contains_batch_norm = self.pl_module_contains_batch_norm(pl_module)
        self._max_epochs = trainer.max_epochs
        if self._scheduler_state is not None and trainer.lr_scheduler_configs:
            # the checkpoint holds SWALR's state, not the user scheduler's: SWALR is rebuilt at the next epoch start
            trainer.lr_scheduler_configs.clear()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        epoch = trainer.current_epoch
        in_window = self.swa_start <= epoch <= self.swa_end
        if in_window and not self._initialized:
            self._start_averaging(trainer, pl_module)
        if in_window and epoch > self._latest_update_epoch:
            assert self._average_model is not None and self.n_averaged is not None  # set by setup and the start
            self.update_parameters(self._average_model, pl_module, self.n_averaged, self._avg_fn)
            self._latest_update_epoch = epoch

    def _start_averaging(self, trainer: Any, pl_module: Any) -> None:
        self._initialized = True
        assert self._average_model is not None  # made in setup
        self._average_model = self._average_model.to(self._device or pl_module.device)
        optimizer = trainer.optimizers[0]
        if isinstance(self._swa_lrs, float):
            self._swa_lrs = [self._swa_lrs] * len(optimizer.param_groups)
        for lr, group in zip(self._swa_lrs, optimizer.param_groups):
            group["initial_lr"] = lr
        self._swa_scheduler = SWALR(
            optimizer,
            swa_lr=self._swa_lrs,  # type: ignore[arg-type]  # one per group, which torch's hint omits
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=self._annealing_strategy,  # type: ignore[arg-type]  # checked in __init__
            last_epoch=trainer.max_epochs if self._annealing_strategy == "cos" else -1,
        )
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
        elif trainer.current_epoch != self.swa_start:
            warnings.warn(
                f"SWA starts at epoch {trainer.current_epoch}, after its start epoch {self.swa_start}, without "
                "state from a checkpoint: the average and the learning rate start from here",
                TrainerWarning,
                stacklevel=2,
            )
        swa_config = LRSchedulerConfig(scheduler=self._swa_scheduler)
        configs = trainer.lr_scheduler_configs
        if configs:
            replaced = configs[0]
            if replaced.interval != "epoch" or replaced.frequency != 1:
                warnings.warn(
                    f"SWA steps its scheduler every epoch; the replaced scheduler had interval="
                    f"{replaced.interval!r}, frequency={replaced.frequency}",
                    TrainerWarning,
                    stacklevel=2,
                )
            _log.info("Swapping scheduler %s for SWALR", type(replaced.scheduler).__name__)
            configs[0] = swa_config
        else:
            configs.append(swa_config)
        if self.n_averaged is None:
            self.n_averaged = torch.tensor(self._init_n_averaged, dtype=torch.long, device=pl_module.device)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if not self._initialized or trainer.current_epoch - 1 != self.swa_end:
            return
        assert self._average_model is not None  # made in setup
        self.transfer_weights(self._average_model, pl_module)
        if self._model_contains_batch_norm:
            self.reset_batch_norm_and_save_state(pl_module)
            try:
                _recompute_batch_norm(trainer, pl_module)
            finally:
                self.reset_momenta()

    @staticmethod
    def transfer_weights(src_pl_module: nn.Module, dst_pl_module: nn.Module) -> None:
        for source, target in zip(src_pl_module.parameters(), dst_pl_module.parameters()):
            target.detach().copy_(source.to(target.device))

    def reset_batch_norm_and_save_state(self, pl_module: nn.Module) -> None:
        """Zero the running statistics and make them a plain average over the coming batches (momentum None)."""
        self.momenta = {}
        for module in pl_module.modules():
            if not isinstance(module, _BatchNorm) or not module.track_running_stats:
                continue
            module.reset_running_stats()  # mean 0, variance 1, no batches tracked
            self.momenta[module] = module.momentum
            module.momentum = None

    def reset_momenta(self) -> None:
        for module, momentum in self.momenta.items():
            module.momentum = momentum

    @staticmethod
    def update_parameters(average_model: nn.Module, model: nn.Module, n_averaged: Tensor, avg_fn: AverageFn) -> None:
        for averaged, current in zip(average_model.parameters(), model.parameters()):
            target = averaged.detach()
            value = current.detach().to(target.device)
            target.copy_(value if n_averaged == 0 else avg_fn(target, value, n_averaged.to(target.device)))
        n_averaged += 1

    @staticmethod
    def avg_fn(averaged_model_parameter: Tensor, model_parameter: Tensor, num_averaged: Tensor) -> Tensor:
        """The running mean."""
        return averaged_model_parameter + (model_parameter - averaged_model_parameter) / (num_averaged + 1)

    def state_dict(self) -> dict[str, Any]:
        return {
            "n_averaged": 0 if self.n_averaged is None else self.n_averaged.item(),
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if self._average_model is None else self._average_model.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._init_n_averaged = state_dict["n_averaged"]
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._scheduler_state = state_dict["scheduler_state"]
        if self._average_model is not None and state_dict["average_model_state"] is not None:
            self._average_model.load_state_dict(state_dict["average_model_state"])


def _recompute_batch_norm(trainer: Any, pl_module: Any) -> None:
    """One pass of `training_step` over the training batches in train mode, without gradients or steps, so
    BatchNorm's running statistics describe the averaged weights."""
    loader = trainer.fit_loop.train_loader
    was_training = pl_module.training
    pl_module.train()
    try:
        # Called as the loop calls it: the hook runner sets the hook name and adapts the step's signature.
        with torch.no_grad(), trainer.strategy.precision.forward_context():
            transfer = data.transfer_for(trainer)
            for batch_idx, batch, _ in data.fetch(loader, trainer.num_training_batches):
                trainer.run.hooks.module("training_step", transfer(batch, 0), batch_idx)
    finally:
        pl_module.train(was_training)


def _check_arguments(
    swa_lrs: Any, swa_epoch_start: Any, annealing_epochs: Any, annealing_strategy: Any, avg_fn: Any, device: Any
) -> None:
    problems = []
    if isinstance(swa_epoch_start, bool) or not isinstance(swa_epoch_start, int | float):
        problems.append(f"swa_epoch_start={swa_epoch_start!r} must be an int >= 1 or a float in [0, 1]")
    elif isinstance(swa_epoch_start, int) and swa_epoch_start < 1:
        problems.append(f"swa_epoch_start={swa_epoch_start!r} must be an int >= 1 or a float in [0, 1]")
    elif isinstance(swa_epoch_start, float) and not 0 <= swa_epoch_start <= 1:
        problems.append(f"swa_epoch_start={swa_epoch_start!r} must be an int >= 1 or a float in [0, 1]")
    lrs_ok = (isinstance(swa_lrs, float) and swa_lrs > 0) or (
        isinstance(swa_lrs, list) and bool(swa_lrs) and all(isinstance(lr, float) and lr > 0 for lr in swa_lrs)
    )
    if not lrs_ok:
        problems.append(f"swa_lrs={swa_lrs!r} must be a positive float or a list of positive floats")
    if isinstance(annealing_epochs, bool) or not isinstance(annealing_epochs, int) or annealing_epochs < 1:
        problems.append(f"annealing_epochs={annealing_epochs!r} must be an int >= 1")
    if annealing_strategy not in ("cos", "linear"):
        problems.append(f"annealing_strategy={annealing_strategy!r} must be 'cos' or 'linear'")
    if avg_fn is not None and not callable(avg_fn):
        problems.append(f"avg_fn={avg_fn!r} must be callable")
    if device is not None and not isinstance(device, torch.device | str):
        problems.append(f"device={device!r} must be a torch.device, a str or None")
    if problems:
        raise MisconfigurationException("invalid StochasticWeightAveraging arguments: " + "; ".join(problems))
