"""`LearningRateFinder` and `BatchSizeFinder`: callbacks that search at fit start, in states of the machine.

At `on_fit_start` a finder asks for its search; the table's `begin` edge then enters its tuning state, which
runs the search and restores the model and trainer state, and fit goes on with the value found. A trainer
whose callbacks include a finder runs on a table with the tuning states (`extend_table`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException
from statemachine.engine.table import MachineTable
from statemachine.tuner.attributes import lr_attribute
from statemachine.tuner.lr_finder import SWEEP_MODES, LRFinder, SweepMode
from statemachine.tuner.table import with_tuning

if TYPE_CHECKING:
    from stages.contract import TrainerView
    from statemachine.run import Run
    from statemachine.trainer import Trainer

ScaleMode = Literal["power", "binsearch"]
SCALE_MODES = get_args(ScaleMode)


class _Finder(Callback):
    """What both finders share: the request for a search in this run, and the table the search needs."""

    _search = "search"

    def __init__(self) -> None:
        self._early_exit = False  # set by the Tuner: the run ends once the search is done
        self._requested_run: object | None = None

    def extend_table(self, table: MachineTable) -> MachineTable:
        return with_tuning(table)

    def _request(self, trainer: Trainer) -> None:
        run = trainer.run
        where = "idle" if run is None else run.flow.machine_state
        if run is None or where != "fitting.setup":
            raise MisconfigurationException(
                f"{type(self).__name__}.{self._search} runs at fit start (from on_fit_start); searching from state "
                f"{where!r} is not supported yet"
            )
        self._requested_run = run

    def requested_in(self, run: Run) -> bool:
        return self._requested_run is run

    def after_restore(self, trainer: TrainerView) -> None:
        """Once the state before the search is back: what the found value changes in the restored trainer
        (nothing by default: a batch size takes effect when fit loads its data)."""


class LearningRateFinder(_Finder):
    """Sweeps the learning rate at fit start, sets the suggested rate on the model, then fit trains with it.

    `optimal_lr` holds the sweep's `LRFinder` (results, suggestion, plot) once it ran.
    """

    _search = "lr_find"

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training_steps: int = 100,
        mode: SweepMode = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        super().__init__()
        problems = []
        if mode not in SWEEP_MODES:
            problems.append(f"mode={mode!r}: expected one of {SWEEP_MODES}")
        if not 0 < min_lr < max_lr:
            problems.append(f"min_lr={min_lr!r}, max_lr={max_lr!r}: expected 0 < min_lr < max_lr")
        if isinstance(num_training_steps, bool) or not isinstance(num_training_steps, int) or num_training_steps < 1:
            problems.append(f"num_training={num_training_steps!r}: expected a positive int")
        if early_stop_threshold is not None and not early_stop_threshold > 0:
            problems.append(f"early_stop_threshold={early_stop_threshold!r}: expected a positive number or None")
        if problems:
            raise ValueError("invalid learning rate finder arguments:\n  " + "\n  ".join(problems))
        self.min_lr = min_lr
        self.max_lr = max_lr
        self.num_training = num_training_steps
        self.mode = mode
        self.early_stop_threshold = early_stop_threshold
        self.update_attr = update_attr
        self.attr_name = attr_name
        self.optimal_lr: LRFinder | None = None

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.lr_find(trainer, pl_module)

    def after_restore(self, trainer: TrainerView) -> None:
        """The optimizer was built before the sweep: fit goes on with the suggested rate."""
        if not self.update_attr or self.optimal_lr is None:
            return
        suggested = self.optimal_lr.suggestion()  # None (and logged why) when the sweep found too few points
        if suggested is not None:
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = suggested

    def lr_find(self, trainer: Any, pl_module: Any) -> None:
        """Ask for the sweep; it runs in `tuning.lr_find` once fit's setup is done."""
        if self.update_attr:
            lr_attribute(pl_module, self.attr_name)  # a missing attribute fails before any step runs
        self._request(trainer)


class BatchSizeFinder(_Finder):
    """Finds the largest batch size that runs without running out of memory, at the start of fit (training
    steps), validate, test or predict (that stage's batches), and writes it to `batch_arg_name` (on the model, its
    hparams, the datamodule or its hparams) before the run loads its data.

    `optimal_batch_size` holds the size found.
    """

    _search = "scale_batch_size"

    def __init__(
        self,
        mode: ScaleMode = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
    ) -> None:
        super().__init__()
        problems = []
        if mode not in SCALE_MODES:
            problems.append(f"mode={mode!r}: expected one of {SCALE_MODES}")
        for name, value in (("steps_per_trial", steps_per_trial), ("init_val", init_val), ("max_trials", max_trials)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"{name}={value!r}: expected a positive int")
        if problems:
            raise ValueError("invalid batch size finder arguments:\n  " + "\n  ".join(problems))
        self.mode = mode
        self.steps_per_trial = steps_per_trial
        self.init_val = init_val
        self.max_trials = max_trials
        self.batch_arg_name = batch_arg_name
        self.optimal_batch_size: int | None = init_val

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.scale_batch_size(trainer, pl_module)

    def scale_batch_size(self, trainer: Any, pl_module: Any) -> None:
        """Ask for the search; it runs in `tuning.scale_batch_size` once fit's setup is done. (For validate, test
        and predict the search runs on entry, in `tuning.validate_batch_size` and the like.)"""
        self._request(trainer)
