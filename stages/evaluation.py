"""Evaluation: the sanity check, in-fit validation, `validate` and `test`, with Lightning's hook order."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import torch

from stages import data
from stages.contract import module_of, run_of
from stages.dataloader_iter import takes_dataloader_iter
from stages.eval_batches import calls, run_batches
from stages.hooks import check_takes_dataloader_idx
from stages.loop_rules import sigterm_stops_evaluation
from stages.progress import BatchProgress
from stages.training import SIGTERMException

if TYPE_CHECKING:
    from stages.contract import RunView, TrainerView

_NOUN = {"val": "validation", "test": "test"}
# Per-batch hook names, built once: no string formatting inside the batch loop.
_BATCH_HOOKS = {
    noun: (f"on_{noun}_batch_start", f"{noun}_step", f"on_{noun}_batch_end") for noun in ("validation", "test")
}


def _every_batch() -> bool:
    """An evaluation batch's step values go to the loggers at every batch, whatever `log_every_n_steps` says."""
    return True


def evaluate(
    trainer: TrainerView,
    kind: str,
    loaders: list[Any],
    num_batches: list[int | float],
    progress: BatchProgress,
) -> list[dict[str, float]]:
    """One pass over every loader, with the VAL hook sequence; returns one dict of numbers per loader. The
    machine's state says what kind of pass it is: a sanity check logs nothing, and a pass inside fit runs without
    autograd but outside inference mode."""
    if sum(num_batches) == 0:
        return []
    sanity, in_fit = trainer.sanity_checking, trainer.state.fn == "fit"
    noun = _NOUN[kind]
    hooks = run_of(trainer).hooks
    metrics = run_of(trainer).metrics
    module = module_of(trainer)
    # The whole loop, its start and end hooks included, runs without autograd (inference mode outside fit).
    grad_mode = torch.inference_mode() if trainer.inference_mode and not in_fit else torch.no_grad()
    for loader in loaders:
        data.set_sampler_epoch(loader, trainer.current_epoch)
    with grad_mode:
        progress.reset_current()  # before the start hooks, which read this run's counters
        module._record_modes()
        hooks.module(f"on_{noun}_model_eval")
        hooks.callbacks(f"on_{noun}_start")
        hooks.module(f"on_{noun}_start")
        hooks.callbacks(f"on_{noun}_epoch_start")
        hooks.module(f"on_{noun}_epoch_start")
        metrics.num_dataloaders = len(loaders)
        fetching = takes_dataloader_iter(getattr(module, _BATCH_HOOKS[noun][1]))
        last_loader = len(loaders) - 1

        def before(batch: Any, batch_idx: int, dataloader_idx: int) -> None:
            metrics.current_batch = batch
            metrics.dataloader_idx = dataloader_idx

        def after(output: Any, dataloader_idx: int, is_last: bool) -> None:
            if not sanity:
                metrics.step_end(kind, None, _every_batch)
            if sigterm_stops_evaluation(trainer) and not (is_last and (fetching or dataloader_idx == last_loader)):
                raise SIGTERMException()

        if not fetching:
            check_takes_dataloader_idx(module, _BATCH_HOOKS[noun][1], f"{kind}_dataloader", len(loaders))
        batch_calls = calls(trainer, loaders, num_batches, kind, fetching)
        run_batches(trainer, _BATCH_HOOKS[noun], batch_calls, fetching, len(loaders), progress, before, after)
        metrics.num_dataloaders, metrics.dataloader_idx = 1, 0
        metrics.epoch_end_reached(kind)
        hooks.callbacks(f"on_{noun}_epoch_end")
        hooks.module(f"on_{noun}_epoch_end")
        reduced = metrics.epoch_end(kind, trainer.fit_loop.batches_that_stepped, not sanity)
        hooks.callbacks(f"on_{noun}_end")
        hooks.module(f"on_{noun}_end")
        hooks.module(f"on_{noun}_model_train")
    return metrics.eval_results(reduced, len(loaders))


class FitValidation:
    """The validation loaders of a fit, requested once and reused by the sanity check and every validation."""

    def __init__(self, trainer: TrainerView):
        self.trainer = trainer
        self.loaders: list[Any] | None = None
        self.num_batches: list[int | float] = []
        self._loaded_epoch: float = -math.inf  # -inf: the next validation requests them, whatever the epoch

    @property
    def needs_loaders(self) -> bool:
        """Not requested yet in this fit, or `reload_dataloaders_every_n_epochs` says they are due."""
        trainer = self.trainer
        every = trainer.reload_dataloaders_every_n_epochs
        return self.loaders is None or (bool(every) and trainer.current_epoch - self._loaded_epoch >= every)

    def load_loaders(self) -> None:
        trainer = self.trainer
        # The sanity check's request counts for `reload_dataloaders_every_n_epochs` only when its epoch
        # validates; otherwise the first validation of the fit requests the loaders again.
        counts = not trainer.sanity_checking or trainer.fit_loop.epoch_validates_at(trainer.current_epoch)
        self._loaded_epoch = trainer.current_epoch if counts else -math.inf
        requested = data.request(trainer, "val")
        trainer.val_dataloaders = requested
        self.loaders = data.as_list(requested)
        if trainer.overfit_batches > 0:
            self.loaders = [data.without_shuffling(loader) for loader in self.loaders]
        limit = trainer.limit_val_batches
        self.num_batches = [data.limited_batches(loader, limit, "limit_val_batches") for loader in self.loaders]
        trainer.num_val_batches = list(self.num_batches)

    def current_loaders(self) -> list[Any]:
        """The loaders, requested now if not yet in this fit or if a reload is due."""
        if self.needs_loaders:
            self.load_loaders()
        assert self.loaders is not None
        return self.loaders

    def teardown(self) -> None:
        self.loaders = None
        self.num_batches = []
        self._loaded_epoch = -math.inf

    def run_sanity_check(self) -> str:
        trainer = self.trainer
        run_of(trainer).metrics.reset_all()
        run_of(trainer).hooks.callbacks("on_sanity_check_start")
        # Lightning's val loop requests its loaders when it runs, after `on_sanity_check_start`
        loaders = self.current_loaders()
        steps = trainer.num_sanity_val_steps
        capped = [min(steps, count) for count in self.num_batches]
        trainer.num_sanity_val_batches = capped
        evaluate(trainer, "val", loaders, capped, trainer.fit_loop.val_progress)
        run_of(trainer).hooks.callbacks("on_sanity_check_end")
        return "sanity_check_done"

    def run(self) -> str:
        trainer = self.trainer
        loop = trainer.fit_loop
        loaders = self.current_loaders()
        if loop.stepped_this_batch:
            run_of(trainer).hooks.module("on_validation_model_zero_grad")
        evaluate(trainer, "val", loaders, self.num_batches, loop.val_progress)
        loop.last_val_end_time = time.monotonic()
        return "validation_done"


def run_val_setup(run: RunView) -> str:
    """`fitting.val_setup`: the first epoch validates, so its loaders are requested before `on_train_start`."""
    run.fit_validation.load_loaders()
    return "val_ready"


def run_sanity_check(run: RunView) -> str:
    return run.fit_validation.run_sanity_check()


def run_fit_validation(run: RunView) -> str:
    return run.fit_validation.run()


def _run_standalone(run: RunView, kind: str, progress: BatchProgress) -> str:
    trainer = run.trainer
    limit = trainer.limit_val_batches if kind == "val" else trainer.limit_test_batches
    requested = None if limit == 0 else data.request(trainer, kind)
    setattr(trainer, "val_dataloaders" if kind == "val" else "test_dataloaders", requested)
    loaders = data.as_list(requested)
    flag = "limit_val_batches" if kind == "val" else "limit_test_batches"
    counts = [data.limited_batches(loader, limit, flag) for loader in loaders]
    if kind == "val":
        trainer.num_val_batches = counts
    else:
        trainer.num_test_batches = counts
    results = evaluate(trainer, kind, loaders, counts, progress)
    run.results = results
    if run.verbose and trainer.is_global_zero and any(results):  # nothing logged: no table
        print(format_results(results, kind))
    return "finish"


def run_validate(run: RunView) -> str:
    return _run_standalone(run, "val", run.trainer.validate_progress)


def run_test(run: RunView) -> str:
    return _run_standalone(run, "test", run.trainer.test_progress)


def format_results(results: list[dict[str, float]], kind: str) -> str:
    """The results table `validate`/`test` print with verbose=True: one column per loader."""
    title = "Validate metric" if kind == "val" else "Test metric"
    names = sorted({name for result in results for name in result})
    headers = [title] + [f"DataLoader {i}" for i in range(len(results))]
    rows = [[name] + [_number(result.get(name)) for result in results] for name in names]
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    rule = "─" * (sum(widths) + 3 * len(widths) + 1)

    def line(cells: list[str]) -> str:
        return "│ " + " │ ".join(str(cell).center(width) for cell, width in zip(cells, widths)) + " │"

    return "\n".join([rule, line(headers), rule, *(line(row) for row in rows), rule])


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
