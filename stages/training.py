"""The `fitting.train_setup`, `fitting.between_epochs` and `fitting.training` handlers: the fit loop's data,
epochs and batches.

The handlers report what happened (`train_ready`, `epoch_boundary`, `epoch_done`); the table's guards decide where
fit goes. The running epoch is a generator: after each batch it polls the table's `val_check` candidates; when one
passes, the machine has moved to `fitting.validating`, the generator pauses, and when control comes back to
`fitting.training` it carries on from that batch.
"""

from __future__ import annotations

import copy
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from devices.parallel import FlagsInFlight, ParallelStrategy
from stages import data, rng
from stages.contract import module_of, run_of
from stages.dataloader_iter import DataloaderIter, Fetched, takes_dataloader_iter
from stages.exceptions import MisconfigurationException, PossibleUserWarning, TrainerWarning
from stages.hooks import is_overridden
from stages.loop_rules import epoch_should_end, epoch_training_done
from stages.loop_views import TrainingEpochLoopView
from stages.module import LightningModule
from stages.progress import BatchProgress, Progress, StepProgress, ZeroGradProgress
from stages.resume import CONTINUES_EPOCH, ResumePoint

if TYPE_CHECKING:
    from stages.contract import RunView, TrainerView

_log = logging.getLogger(__name__)


# Lightning's step hooks: when none is customized, an automatic step needs no closure (the direct step in _run_batches).
_STEP_HOOKS = (
    "optimizer_step",
    "optimizer_zero_grad",
    "backward",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "configure_gradient_clipping",
)
# torch optimizers whose step evaluates a closure exactly once, before the update (not LBFGS).
_CLOSURE_ONCE = frozenset(
    {
        torch.optim.SGD,
        torch.optim.Adam,
        torch.optim.AdamW,
        torch.optim.Adagrad,
        torch.optim.Adadelta,
        torch.optim.Adamax,
        torch.optim.NAdam,
        torch.optim.RAdam,
        torch.optim.RMSprop,
        torch.optim.Rprop,
    }
)
# FitLoop attributes that are not its state: the trainer, its views, the running epoch, the loader, a collective.
_NOT_STATE = frozenset(
    {"trainer", "epoch_loop", "_epoch", "_train_loader", "loaded_train", "_flags_in_flight", "_flags_behind"}
)
_EPOCH_DONE = object()  # what the running epoch's generator gives once it has ended


# A training step of one epoch: (step input, index, whether it is the epoch's last) -> (output, divided loss or None).
StepFunction = Callable[[Any, int, bool], tuple[Any, Tensor | None]]


class SIGTERMException(SystemExit):
    """Raised at the next safe point after SIGTERM, so the interrupt path (and on_exception) runs.

    `agreed`: in a multi-process run, every rank raised it at the same batch (the flag is reduced across ranks
    first), so the interrupt path can still use collectives, e.g. to save one consistent checkpoint.
    """

    def __init__(self, agreed: bool = False) -> None:
        super().__init__(143)
        self.agreed = agreed


class FitLoop:
    def __init__(self, trainer: TrainerView):
        self.trainer = trainer
        self.epoch_progress = Progress()
        self.batch_progress = BatchProgress()
        self.scheduler_progress = StepProgress()
        self.optimizer_step_progress = StepProgress()
        self.zero_grad_progress = ZeroGradProgress()
        self.manual_step_progress = StepProgress()
        self.val_progress = BatchProgress()
        self.batches_that_stepped = 0
        self.num_training_batches: int | float = math.inf
        self.val_check_batch: int | float | None = math.inf  # None: validation is scheduled by time
        self.val_check_seconds: float | None = None
        self.last_val_end_time = 0.0
        self.batch_idx = 0
        self.is_last_batch = False
        self.epoch_validates = False
        # a stop held back by min_epochs/min_steps is announced once per trainer, not after every batch
        self.told_minimums_wait = False
        self.resume_point = ResumePoint.FRESH  # where the restored checkpoint left this fit; set by the fit edge
        self.epoch_start_rng: dict[str, Any] | None = None  # before this epoch's loader iterator was created
        self._restored_rng: dict[str, Any] | None = None  # a checkpoint's RNG states, set when training continues
        self.stepped_this_batch = False
        self.automatic = True  # the module's automatic_optimization, read once per epoch (used per batch)
        self.multi_process = False  # several ranks in this run, read once per epoch (used per batch)
        # Multi-process: this rank's flags, being agreed while a batch runs (see `_send_flags`); reading them a batch
        # late, those agreed over the batch before, not read yet; what the ranks agreed last on a SIGTERM and on
        # `_val_interval_passed`.
        self._flags_in_flight: FlagsInFlight | None = None
        self.reads_flags_behind = False  # the strategy's `flags_read_behind`, read once per epoch
        self._flags_behind: Callable[[], list[bool]] | None = None
        self._sigterm_agreed = False
        self._val_time_agreed = False
        self.fetches_itself = False  # training_step takes `dataloader_iter`
        self.fetched_in_epoch = 0  # with dataloader_iter: the batches the step fetched this epoch, its loader position
        self._train_loader: Any = None
        # What `trainer.train_dataloader` shows: the loader this fit loaded, kept after the fit returns (the run's
        # own reference is dropped at teardown) until the next trainer call starts.
        self.loaded_train: Any = None
        self._train_loaded_epoch = 0
        self._epoch: Iterator[None] | None = None  # the epoch in progress, paused while a validation runs
        self._continues = False  # the next epoch to run continues the restored one (a mid-epoch resume)
        self.epoch_loop = TrainingEpochLoopView(self)  # Lightning's `fit_loop.epoch_loop`, for users' reads

    @property
    def train_loader(self) -> Any:
        return self._train_loader

    # ---- the limits, as Lightning's loop holds them: setting one on a finished fit lets the next fit go on --------

    @property
    def max_epochs(self) -> int:
        return self.trainer.max_epochs

    @max_epochs.setter
    def max_epochs(self, value: int) -> None:
        self.trainer.max_epochs = value

    @property
    def min_epochs(self) -> int:
        return self.trainer.min_epochs

    @min_epochs.setter
    def min_epochs(self, value: int) -> None:
        self.trainer.min_epochs = value

    @property
    def max_steps(self) -> int:
        """Set it on `epoch_loop`, as in Lightning."""
        return self.trainer.max_steps

    @property
    def min_steps(self) -> int | None:
        return self.trainer.min_steps

    # ---- counters users read ----------------------------------------------------------------------------

    @property
    def total_batch_idx(self) -> int:
        """The run's batch index over every epoch (Lightning's: batches started, minus one); it is restored with
        the progress, so `val_check_interval` counted across epochs continues after a resume."""
        return self.batch_progress.total.ready - 1

    @property
    def current_epoch(self) -> int:
        return self.epoch_progress.current.completed

    @property
    def global_step(self) -> int:
        module = self.trainer.lightning_module
        if module is not None and not module.automatic_optimization:
            return self.manual_step_progress.total.completed
        return self.optimizer_step_progress.total.completed

    @property
    def batch_in_flight(self) -> int | None:
        """The batch index while an epoch's batches run (or wait for a validation); None between epochs."""
        progress = self.epoch_progress.current
        return self.batch_idx if self._epoch is not None and progress.started > progress.processed else None

    def on_optimizer_stepped(self) -> None:
        (self.optimizer_step_progress if self.automatic else self.manual_step_progress).increment_step()
        self.stepped_this_batch = True

    def _reset_epoch_counters(self) -> None:
        """A new epoch: the `current` counters of its batches, scheduler and optimizer steps count it alone, and
        the validation total counts the validations of this epoch (manual steps count the whole run)."""
        self.batch_progress.reset_current()
        self.scheduler_progress.reset_current()
        self.optimizer_step_progress.reset_current()
        self.zero_grad_progress.reset_current()
        self.val_progress.total.reset()

    # ---- the handlers -----------------------------------------------------------------------------------

    def setup_data(self) -> str:
        """`fitting.train_setup`: load the training data (unless already loaded) and start the validation clock."""
        if self._train_loader is None:  # estimated_stepping_batches may have loaded it already
            self.load_train_data()
        self.last_val_end_time = time.monotonic()
        return "train_ready"

    def between_epochs(self) -> str:
        """`fitting.between_epochs`: no epoch runs; the table's `epoch_boundary` guards decide whether fit stops."""
        return "epoch_boundary"

    def run(self) -> str | None:
        """`fitting.training`: the epoch's batches, from its start, from where a mid-epoch checkpoint left it, or
        from the batch a validation paused it at. None: a poll moved the machine to validation; `epoch_done` once the
        epoch has ended."""
        if self._epoch is None:
            self._epoch = self._run_epoch(self._continues)
            self._continues = False
        with torch.autograd.set_detect_anomaly(self.trainer.detect_anomaly):
            if next(self._epoch, _EPOCH_DONE) is None:
                return None
        self._epoch = None
        return "epoch_done"

    def run_epoch(self) -> None:
        """One whole epoch for a caller outside `fitting.training` (a tuner's search), whose state has no
        `val_check` edge: no poll can pause it, so the epoch runs to its end."""
        for _ in self._run_epoch(continues=False):
            raise RuntimeError("internal error: a poll paused an epoch that runs outside fitting.training")

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the loop's state (counters, flags, resume point, ...), for a caller that runs the loop
        and then puts it back as it was (the tuner's searches)."""
        return {name: copy.deepcopy(value) for name, value in vars(self).items() if name not in _NOT_STATE}

    def restore_snapshot(self, state: dict[str, Any]) -> None:
        """The loop as `snapshot()` found it; its training data is loaded again, with whatever the caller changed
        (a batch size found by a search)."""
        vars(self).update(state)
        self._train_loader = None

    def teardown(self) -> None:
        """Drop the training in flight and the loaders: nothing of this run may leak into the next."""
        self._epoch = None
        self._continues = False
        self._train_loader = None
        self._restored_rng = None
        self._flags_in_flight = self._flags_behind = None  # a run that failed mid-epoch may leave flags unread
        self.resume_point = ResumePoint.FRESH

    # ---- start ------------------------------------------------------------------------------------------

    def load_train_data(self) -> None:
        trainer = self.trainer
        limit = trainer.limit_train_batches
        self._train_loaded_epoch = self.current_epoch
        self.fetches_itself = takes_dataloader_iter(module_of(trainer).training_step)
        if limit == 0 or not is_overridden("training_step", trainer.lightning_module, LightningModule):
            self.num_training_batches = 0
            self._train_loader = ()
            return
        loader = data.train_loader(data.request(trainer, "train"))
        self._train_loader = self.loaded_train = (
            data.without_shuffling(loader) if trainer.overfit_batches > 0 else loader
        )
        self.num_training_batches = data.limited_batches(self._train_loader, limit, "limit_train_batches")
        data.warn_if_no_training_batches(self._train_loader, self.num_training_batches)
        if trainer.loggers and not trainer.fast_dev_run and self.num_training_batches < trainer.log_every_n_steps:
            warnings.warn(
                f"The number of training batches ({self.num_training_batches}) is smaller than the logging interval "
                f"Trainer(log_every_n_steps={trainer.log_every_n_steps}). Set a lower value for log_every_n_steps if "
                "you want to see logs for the training epoch.",
                PossibleUserWarning,
                stacklevel=2,
            )
        self._set_val_check_batch()

    def _train_reload_due(self) -> bool:
        every = self.trainer.reload_dataloaders_every_n_epochs
        return bool(every) and self.current_epoch - self._train_loaded_epoch >= every

    def _set_val_check_batch(self) -> None:
        trainer = self.trainer
        interval = trainer.val_check_interval
        self.val_check_seconds = trainer.val_check_seconds
        if self.val_check_seconds is not None:
            self.val_check_batch = None
        elif isinstance(interval, int):
            too_many = interval > self.num_training_batches
            if too_many and trainer.check_val_every_n_epoch is not None and trainer.limit_val_batches != 0:
                raise ValueError(
                    f" `val_check_interval` ({interval}) must be less than or equal to the number of the training "
                    f"batches ({self.num_training_batches}). If you want to disable validation set "
                    "`limit_val_batches` to 0.0 instead. If you want to validate based on the total training "
                    "batches, set `check_val_every_n_epoch=None`."
                )
            self.val_check_batch = interval
        elif self.num_training_batches == math.inf:
            if interval != 1.0:
                raise MisconfigurationException(
                    "When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)` must be "
                    "time based, `1.0` or an int. An int k specifies checking validation every k training batches. "
                    f"(val_check_interval={interval!r} is a fraction of an epoch whose length is unknown)"
                )
            self.val_check_batch = math.inf
        else:
            assert isinstance(interval, float)  # a time interval was handled first, an int above
            self.val_check_batch = max(1, int(self.num_training_batches * interval))

    def start_training(self) -> None:
        """`on_train_start`; the first epoch continues the saved one when the resume point says so."""
        trainer = self.trainer
        # Training does not call model.train(): a (sub)module left in eval mode trains in eval mode, so say so.
        in_eval = sum(not module.training for module in module_of(trainer).modules())
        if in_eval:
            warnings.warn(
                f"Found {in_eval} module(s) in eval mode at the start of training. This may lead to unexpected "
                "behavior during training. If this is intentional, you can ignore this warning.",
                PossibleUserWarning,
                stacklevel=2,
            )
        self.automatic = module_of(trainer).automatic_optimization
        run_of(trainer).hooks.callbacks("on_train_start")
        run_of(trainer).hooks.module("on_train_start")
        self._continues = self.resume_point in CONTINUES_EPOCH

    def epoch_validates_at(self, epoch: int) -> bool:
        trainer = self.trainer
        every = trainer.check_val_every_n_epoch
        return trainer.enable_validation and (every is None or (epoch + 1) % every == 0)

    # ---- one epoch --------------------------------------------------------------------------------------

    def _run_epoch(self, continues: bool) -> Iterator[None]:
        """One epoch; `continues`: carry on with the restored epoch at its next batch, without its start hooks."""
        trainer = self.trainer
        hooks = run_of(trainer).hooks
        saved, self._restored_rng = self._restored_rng, None
        replay_from = self.epoch_start_rng if continues and saved is not None else None
        if saved is not None and replay_from is None:
            rng.restore(saved)  # resumed at an epoch boundary: continue with the saved draws
        if not continues and self._train_reload_due():
            self.load_train_data()
        data.set_sampler_epoch(self._train_loader, self.current_epoch)
        # The validation loaders are requested by the validation that needs them (due for a reload, or first used
        # in this epoch), while the machine is in `fitting.validating`.
        self.epoch_validates = self.epoch_validates_at(self.current_epoch)
        if not continues:
            self.epoch_progress.increment_ready()
            run_of(trainer).metrics.reset_bucket("train")
            hooks.callbacks("on_train_epoch_start")
            hooks.module("on_train_epoch_start")
            self.epoch_progress.increment_started()
            self._reset_epoch_counters()
        # Read after the epoch-start hooks, which may change them (e.g. set gradient_clip_val).
        self.multi_process = trainer.world_size > 1
        self.automatic = module_of(trainer).automatic_optimization
        start = self.batch_progress.current.completed
        if self.fetches_itself:  # the loader's position is what the step fetched, not how often it ran
            start = self.fetched_in_epoch if continues else 0
        positioned = None
        if saved is not None and replay_from is not None:
            # Exact resume: replay the epoch's loader up to its position, then continue with the saved draws.
            rng.restore(replay_from)
            positioned = partial(rng.restore, saved)
        else:
            self.epoch_start_rng = rng.capture()
        data.check_training_mode(self._train_loader)
        batches = data.fetch(
            self._train_loader,
            self.num_training_batches,
            start,
            positioned,
            profiler=run_of(trainer).profiler,
            action="train_dataloader_next",
        )
        step, step_hook = self._step_function()
        with hooks.naming(step_hook):
            yield from self._run_batches(self._fetching_calls(batches, start) if self.fetches_itself else batches, step)
        self._end_epoch()

    def _run_batches(self, calls: Iterator[tuple[int, Any, bool]], step: StepFunction) -> Iterator[None]:
        """Each step call up to `on_train_batch_end`, then the table's `val_check` poll (the epoch pauses while the
        machine validates), then the loop's end-of-batch rules. One sequence for every kind of step: the step
        function (see `_step_function`) and where its input comes from (a loader's batch, moved to the device, or
        the `dataloader_iter` a step fetches from, see `_fetching_calls`) are chosen once per epoch, after the
        epoch-start hooks, which may change them. For a small model these lines are the trainer's whole per-batch
        cost: what a batch may skip is decided here once."""
        trainer = self.trainer
        run = run_of(trainer)
        hooks, optimization, metrics, progress = run.hooks, run.optimization, run.metrics, self.batch_progress
        # No val_check candidate can pass in this epoch (the table's require a validating one): nothing to poll.
        poll_val_check = run.flow.poller("val_check") if run.flow.may_pass("val_check") else None
        fetching, automatic, multi_process = self.fetches_itself, self.automatic, self.multi_process
        transfer = data.train_transfer_for(trainer)
        # Whether a batch's logged values go to the loggers: with accumulation, only a batch that steps decides.
        accumulates = automatic and trainer.accumulate_grad_batches > 1
        logs_step_metrics = self._logs_step_metrics if accumulates else self.should_log
        step_values = metrics.bucket("train")
        start_hooks = not hooks.all_default(("on_train_batch_start",))
        end_hooks = not hooks.all_default(("on_train_batch_end",))
        if multi_process:
            self.reads_flags_behind, self._flags_behind = self._parallel_strategy().flags_read_behind, None
            self._send_flags(stop_requested=False)
        for index, item, is_last in calls:
            self.batch_idx = index
            self.is_last_batch = progress.is_last_batch = is_last
            progress.increment_ready()
            # The batch hooks see the loader's batch; around a fetching step, the batch it fetched last.
            if fetching:
                step_input, batch, batch_idx = item, item.batch, item.batch_idx
            else:
                step_input = batch = transfer(item)
                batch_idx = index
            metrics.current_batch = batch
            if start_hooks and self._batch_start_ends_epoch(batch, batch_idx):
                self.is_last_batch = True
                break
            progress.increment_started()
            self.stepped_this_batch = False
            ran_out = False
            try:
                output, loss = step(step_input, index, is_last)
            except StopIteration:
                if not fetching:
                    raise
                ran_out = True  # the step ran into the end of the data: the epoch ends with it
            if fetching:
                batch, batch_idx = item.batch, item.batch_idx
                self.is_last_batch = progress.is_last_batch = item.done or ran_out
            progress.increment_processed()
            if optimization.lr_scheduler_configs:
                self._step_schedulers(index, self.is_last_batch)
                if ran_out and automatic:
                    # The epoch ends on a step that did not step the optimizer: its epoch-interval schedulers still
                    # step once.
                    optimization.step_schedulers("epoch", self.current_epoch + 1, plateau=False)
            if end_hooks and not ran_out:
                self._batch_end(self.batch_outputs(output, loss), batch, batch_idx)
            progress.increment_completed()
            if step_values:  # the batch logged something
                metrics.step_end("train", self.batches_that_stepped, logs_step_metrics)
            stop_requested = self._take_flags() if multi_process else False
            if poll_val_check is not None and poll_val_check():
                yield None
                poll_val_check = run.flow.poller("val_check")  # for the state the machine resumed the epoch in
            if self.stepped_this_batch:
                if automatic and optimization.lr_scheduler_configs:
                    optimization.step_schedulers("step", self.batch_idx + 1, plateau=True)
                self.batches_that_stepped += 1
            # Without a stop asked for, the epoch ends when its training is done.
            if trainer.should_stop or trainer.received_sigterm:
                epoch_ends = self._stop_requested()
            else:
                epoch_ends = epoch_training_done(trainer)
            if multi_process:
                # Sent after the batch's validation and decisions, so that what they set goes out, and the clock a
                # validation restarted is read afresh.
                self._send_flags(stop_requested)
            if epoch_ends:
                break

    def _fetching_calls(self, batches: Iterator[Fetched], start: int) -> Iterator[tuple[int, DataloaderIter, bool]]:
        """The epoch's step calls for a step that takes `dataloader_iter`: (index, the iterator the step gets,
        False: whether a call fetches the last batch shows only after it). `batches` start at the loader position
        `start`; the loop keeps the position, which a mid-epoch checkpoint saves."""
        metrics = run_of(self.trainer).metrics
        self.fetched_in_epoch = start

        def on_fetch(batch: Any, batch_idx: int, _: int) -> None:
            metrics.current_batch = batch  # self.log infers the batch size from the batch the step fetched
            self.fetched_in_epoch = batch_idx + 1

        fetcher = DataloaderIter(iter((batches,)), on_fetch)
        step_idx = self.batch_progress.current.completed
        while not fetcher.done:
            yield step_idx, fetcher, False
            step_idx += 1

    def _step_function(self) -> tuple[StepFunction, str | None]:
        """This epoch's step, and the hook name its batches run under (None: each hook call names itself).
        Manual optimization calls `training_step` alone; automatic optimization runs it inside the optimizer's
        closure with every step hook, or, when nothing hooks into the step, calls the optimizer directly (the same
        calls in the same order, without the closure), with `training_step` named once for the epoch."""
        if not self.automatic:
            return self._manual_step, None
        if self._direct_step_allowed():
            return self._direct_step(), "training_step"
        return self._automatic_step, None

    def _batch_start_ends_epoch(self, batch: Any, batch_idx: int) -> bool:
        """`on_train_batch_start`, callbacks then the module; the module returning -1 ends the epoch. That batch
        counts as the epoch's last although nothing ran: as in Lightning, its step-interval LR schedulers step by
        its index, and the epoch-interval ones for the epoch."""
        run = run_of(self.trainer)
        run.hooks.callbacks("on_train_batch_start", batch, batch_idx)
        if not bool(run.hooks.module("on_train_batch_start", batch, batch_idx) == -1):
            return False
        if self.automatic and run.optimization.lr_scheduler_configs:
            run.optimization.step_schedulers("step", self.batch_idx + 1, plateau=False)
            run.optimization.step_schedulers("epoch", self.current_epoch + 1, plateau=False)
        return True

    def _batch_end(self, outputs: dict[str, Any], batch: Any, batch_idx: int) -> None:
        hooks = run_of(self.trainer).hooks
        hooks.callbacks("on_train_batch_end", outputs, batch, batch_idx)
        hooks.module("on_train_batch_end", outputs, batch, batch_idx)

    def batch_outputs(self, output: Any, loss: Tensor | None) -> dict[str, Any]:
        """What `on_train_batch_end` sees: in automatic optimization the detached (divided) loss plus the step's
        other keys; in manual optimization the step's output, detached."""
        if not self.automatic:
            if isinstance(output, Tensor):
                return {"loss": output.detach()}
            if isinstance(output, dict):
                return {key: value.detach() if isinstance(value, Tensor) else value for key, value in output.items()}
            return {}
        if loss is None:
            return {}
        extra = {k: v for k, v in output.items() if k != "loss"} if isinstance(output, dict) else {}
        return {"loss": loss.detach(), **extra}

    def should_log(self) -> bool:
        every = self.trainer.log_every_n_steps
        return bool(every) and ((self.batches_that_stepped + 1) % every == 0 or self.trainer.should_stop)

    def _logs_step_metrics(self) -> bool:
        """`should_log`, except on a batch that only accumulates gradients: the step it leads to logs."""
        k = self.trainer.accumulate_grad_batches
        if k > 1 and self.automatic and (self.batch_idx + 1) % k and not self.is_last_batch:
            return False
        return self.should_log()

    def _direct_step_allowed(self) -> bool:
        """Whether this epoch's automatic steps may call the optimizer directly instead of through its closure:
        nothing hooks into the step (the module's and callbacks' step hooks are Lightning's defaults, no clipping,
        no profiler), the strategy adds nothing to backward and step, and the one optimizer is a torch optimizer
        known to evaluate a closure once, before its update. The calls and their order are then the same."""
        trainer = self.trainer
        optimizers = run_of(trainer).optimization.optimizers
        return (
            self.automatic
            and len(optimizers) == 1
            and type(optimizers[0]) in _CLOSURE_ONCE
            and not trainer.gradient_clip_val
            and run_of(trainer).profiler is None
            and trainer.strategy.plain_steps
            and run_of(trainer).hooks.all_default(_STEP_HOOKS)
        )

    def _direct_step(self) -> StepFunction:
        """What an automatic step's closure does when nothing hooks into it, in its order, with what it reads bound
        once: it runs for every batch."""
        run = run_of(self.trainer)
        optimizer = run.optimization.optimizers[0]
        training_step, check_loss = run.hooks.step_method("training_step"), run.optimization.check_loss
        k = self.trainer.accumulate_grad_batches
        zero_grad_progress, on_optimizer_stepped = self.zero_grad_progress, self.on_optimizer_stepped
        loss_for_backward = self.trainer.strategy.loss_for_backward

        def direct_step(batch: Any, batch_idx: int, is_last: bool) -> tuple[Any, Tensor | None]:
            with torch.enable_grad():
                output = training_step(batch, batch_idx)
            loss = output if type(output) is Tensor else _loss_of(output)  # the common case without a call
            if batch_idx % k == 0:
                optimizer.zero_grad()
                zero_grad_progress.increment_whole()
            if loss is not None:
                loss = loss / k if k > 1 else loss
                check_loss(loss)
                loss_for_backward(loss).backward()
            if (batch_idx + 1) % k == 0 or is_last:
                optimizer.step()
                on_optimizer_stepped()
            return output, loss

        return direct_step

    def _automatic_step(self, batch: Any, batch_idx: int, is_last: bool) -> tuple[Any, Tensor | None]:
        """The step, zero_grad and backward inside the optimizer's closure, through every step hook: returns the
        step's output and the (divided) loss."""
        trainer = self.trainer
        hooks = run_of(trainer).hooks
        k = trainer.accumulate_grad_batches
        wrapped = run_of(trainer).optimization.lightning_optimizers
        optimizer = wrapped[0].optimizer if wrapped else None
        zero_grad_now = batch_idx % k == 0
        epoch = self.current_epoch
        captured: dict[str, Any] = {}

        forward_context = trainer.strategy.precision.forward_context

        def closure() -> Tensor | None:
            with torch.enable_grad(), forward_context():
                output = hooks.module("training_step", batch, batch_idx)
            loss = _loss_of(output)
            if zero_grad_now and optimizer is not None:
                self.zero_grad_progress.increment_ready()
                hooks.callbacks("on_before_zero_grad", optimizer)
                hooks.module("on_before_zero_grad", optimizer)
                self.zero_grad_progress.increment_started()
                hooks.module("optimizer_zero_grad", epoch, batch_idx, optimizer)
                self.zero_grad_progress.increment_completed()
            if loss is not None:
                loss = loss / k if k > 1 else loss
                run_of(trainer).optimization.run_backward(loss)
            captured["output"], captured["loss"] = output, loss
            return loss

        steps = (batch_idx + 1) % k == 0 or is_last
        if steps and optimizer is not None:
            hooks.module("optimizer_step", epoch, batch_idx, wrapped[0], closure)
        else:
            closure()
        return captured["output"], captured["loss"]

    def _manual_step(self, batch: Any, batch_idx: int, is_last: bool) -> tuple[Any, None]:
        """`training_step` alone: the module steps its optimizers itself."""
        trainer = self.trainer
        with torch.enable_grad(), trainer.strategy.precision.forward_context():
            return run_of(trainer).hooks.module("training_step", batch, batch_idx), None

    def _step_schedulers(self, batch_idx: int, is_last: bool) -> None:
        """Step-interval schedulers after a step; epoch-interval ones on the epoch's last batch."""
        trainer = self.trainer
        optimization = run_of(trainer).optimization
        if not self.automatic or not self.stepped_this_batch or not optimization.lr_scheduler_configs:
            return
        optimization.step_schedulers("step", batch_idx + 1, plateau=False)
        if is_last or batch_idx + 1 == self.num_training_batches:
            optimization.step_schedulers("epoch", self.current_epoch + 1, plateau=False)

    def _stop_requested(self) -> bool:
        """After a batch that asked to stop or saw a SIGTERM: the loggers save what they hold, and a SIGTERM that
        stops the run is raised, unless this epoch's training is done anyway. Returns whether the epoch ends."""
        trainer = self.trainer
        if trainer.should_stop:
            for logger in trainer.loggers:
                logger.save()
        if self._sigterm_stops() and not epoch_training_done(trainer):
            raise SIGTERMException(agreed=self.multi_process)
        return epoch_should_end(trainer)

    def _send_flags(self, stop_requested: bool) -> None:
        """Multi-process, before a batch: start agreeing this rank's inputs to the loop's decisions (`should_stop`,
        a SIGTERM, whether the time-based validation interval has passed on its clock; any rank's counts for
        all) while the batch runs: in one small collective, or, under DDP, inside the batch's gradient all-reduce
        (see `DDPStrategy.start_any`). `_take_flags` reads the result after it.

        The decisions after batch k thus use the flags sent after batch k - 1, or k - 2 where they are read a batch
        late (on a device, see `ParallelStrategy.flags_read_behind`): every rank reads the same values at the same
        batch, and no batch waits for the collective, nor the host for the device."""
        trainer = self.trainer
        # An agreed stop stays agreed; this rank's own request, taken before the agreed value replaced it, joins it.
        flags = (stop_requested or trainer.should_stop, trainer.received_sigterm, self._val_interval_passed())
        self._flags_in_flight = self._parallel_strategy().start_any(flags)

    def _parallel_strategy(self) -> ParallelStrategy:
        strategy = self.trainer.strategy
        assert isinstance(strategy, ParallelStrategy), "several ranks run under a ParallelStrategy"
        return strategy

    def _take_flags(self, at_once: bool = False) -> bool:
        """Multi-process, after a batch: the flags agreed while it ran (reading behind: the batch before; `at_once`:
        all not read yet) become this rank's, before the batch's decisions. Returns `should_stop` as this rank's
        code left it, for `_send_flags` to send next: until the ranks agree on it, `trainer.should_stop` reads what
        they agreed before."""
        trainer = self.trainer
        requested = trainer.should_stop
        settle, self._flags_in_flight = self._flags_in_flight, None
        assert settle is not None, "each epoch's batches start with flags in flight, and each batch sends the next"
        read, behind = settle(), self._flags_behind
        if self.reads_flags_behind and not at_once:
            self._flags_behind = read
            stop, sigterm, val_time = (False, False, False) if behind is None else behind()
        else:
            agreed = read()
            if behind is not None:
                self._flags_behind = None
                agreed = [now or before for now, before in zip(agreed, behind(), strict=True)]
            stop, sigterm, val_time = agreed
        if stop != requested:  # written only when it changes: the Trainer's __setattr__ is a call a batch
            trainer.should_stop = stop
        # Never lowered: a SIGTERM that reached this rank after its flags were sent goes out with the next ones.
        if sigterm and not trainer.received_sigterm:
            trainer.received_sigterm = True
        self._sigterm_agreed, self._val_time_agreed = sigterm, val_time
        return requested

    def _agree_now(self) -> None:
        """At the epoch's end (multi-process), before fit decides whether to go on: the flags in flight and this
        rank's now, agreed at once, so no rank's request is lost with the epoch or acted on by that rank alone."""
        self._send_flags(self._take_flags(at_once=True))
        self._take_flags(at_once=True)

    def _sigterm_stops(self) -> bool:
        """A SIGTERM stops the run: with several ranks once they agreed on it, so that all stop at the same batch."""
        return self._sigterm_agreed if self.multi_process else self.trainer.received_sigterm

    def _val_interval_passed(self) -> bool:
        interval = self.val_check_seconds
        return interval is not None and time.monotonic() - self.last_val_end_time >= interval

    def time_for_validation(self) -> bool:
        """Time-based validation: the interval has passed (agreed across ranks in a multi-process run)."""
        return self._val_time_agreed if self.multi_process else self._val_interval_passed()

    def _end_epoch(self) -> None:
        trainer = self.trainer
        hooks = run_of(trainer).hooks
        self.epoch_progress.increment_processed()
        run_of(trainer).metrics.epoch_end_reached("train")
        hooks.callbacks_where("on_train_epoch_end", False)
        hooks.module("on_train_epoch_end")
        # The monitoring callbacks see this epoch's reductions through the live view (epoch_end_reached above),
        # so a checkpoint ranks this epoch's value; they reach the loggers after, as in Lightning.
        hooks.callbacks_where("on_train_epoch_end", True)
        # The logging step already moved past the epoch's last batch; its epoch values belong to that batch.
        run_of(trainer).metrics.epoch_end("train", self.batches_that_stepped - 1, bool(trainer.loggers))
        if self.automatic and self._all_batches_ran():
            run_of(trainer).optimization.step_schedulers("epoch", self.current_epoch + 1, plateau=True)
        self.epoch_progress.increment_completed()
        if self.multi_process:
            self._agree_now()
        if self._sigterm_stops():
            raise SIGTERMException(agreed=self.multi_process)

    def _all_batches_ran(self) -> bool:
        return self.batch_progress.current.completed == self.num_training_batches or self.is_last_batch

    # ---- checkpoint state ----------------------------------------------------------

    def resume_state(self) -> dict[str, Any]:
        """Beyond Lightning's keys, for an exact resume: the RNG states now and at the epoch's start, and the
        loader position of a step that fetches its own batches."""
        state = {"rng": rng.capture(), "epoch_start_rng": self.epoch_start_rng}
        return {**state, "fetched_in_epoch": self.fetched_in_epoch} if self.fetches_itself else state

    def load_resume_state(self, state: dict[str, Any] | None) -> None:
        """Without `state` (a Lightning file), a mid-epoch resume runs only the remaining number of batches."""
        self._restored_rng = None if state is None else state["rng"]
        self.epoch_start_rng = None if state is None else state["epoch_start_rng"]
        self.fetched_in_epoch = 0 if state is None else state.get("fetched_in_epoch", 0)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The counters of `state_dict()`, as a checkpoint's `loops.fit_loop` stores them."""
        self.epoch_progress.load_state_dict(state["epoch_progress"])
        self.batch_progress.load_state_dict(state["epoch_loop.batch_progress"])
        self.scheduler_progress.load_state_dict(state["epoch_loop.scheduler_progress"])
        self.manual_step_progress.load_state_dict(state["epoch_loop.manual_optimization.optim_step_progress"])
        self.epoch_loop.automatic_optimization.optim_progress.load_state_dict(
            state["epoch_loop.automatic_optimization.optim_progress"]
        )
        self.val_progress.load_state_dict(state["epoch_loop.val_loop.batch_progress"])
        self.batches_that_stepped = state["epoch_loop.state_dict"]["_batches_that_stepped"]

    def state_dict(self) -> dict[str, Any]:
        return {
            "state_dict": {},
            "epoch_loop.state_dict": {"_batches_that_stepped": self.batches_that_stepped},
            "epoch_loop.batch_progress": self.batch_progress.state_dict(),
            "epoch_loop.scheduler_progress": self.scheduler_progress.state_dict(),
            "epoch_loop.manual_optimization.state_dict": {},
            "epoch_loop.manual_optimization.optim_step_progress": self.manual_step_progress.state_dict(),
            "epoch_loop.automatic_optimization.state_dict": {},
            "epoch_loop.automatic_optimization.optim_progress": (
                self.epoch_loop.automatic_optimization.optim_progress.state_dict()
            ),
            "epoch_loop.val_loop.state_dict": {},
            "epoch_loop.val_loop.batch_progress": self.val_progress.state_dict(),
            "epoch_progress": self.epoch_progress.state_dict(),
        }


def _loss_of(output: Any) -> Tensor | None:
    """The loss an automatic step backpropagates (None: the step skips this batch)."""
    if isinstance(output, Tensor):
        return output
    if output is None:
        warnings.warn("training_step returned None: this batch was skipped", TrainerWarning, stacklevel=3)
        return None
    if isinstance(output, dict):
        if "loss" not in output:
            raise MisconfigurationException(
                f"training_step returned a dict without 'loss' (keys: {sorted(output)}); "
                "return the loss tensor or a dict with 'loss'"
            )
        return output["loss"]
    raise MisconfigurationException(
        f"training_step returned {type(output).__name__}; return a loss tensor, a dict with 'loss', or None"
    )


def run_train_setup(run: RunView) -> str:
    return run.fit_loop.setup_data()


def run_between_epochs(run: RunView) -> str:
    return run.fit_loop.between_epochs()


def run_training(run: RunView) -> str | None:
    return run.fit_loop.run()
