"""The tuner's states, added to a trainer's table with `MachineTable.extend`.

A finder callback asks for a search at fit start; the `begin` edge out of `fitting.setup` then enters the
search's state instead of the sanity check (the model, optimizers and data hooks are all set up by then). For
validate/test/predict, a `BatchSizeFinder` among the callbacks makes the entry edge go to the search's state,
after the same setup chain. The edge in saves the model and trainer state; every edge out restores it: on to the
run (`fitting.setup` for the next search or the fit itself, or `validating`/`testing`/`predicting`), to
`finished` when the `Tuner` asked for the search alone, or to `interrupted` on a failure.
"""

from __future__ import annotations

from statemachine.enums import RunningStage, TrainerFn, TrainerStatus
from statemachine.table import RESTING_SOURCES, TABLE, MachineTable, StateSpec, TransitionSpec

_ACTIONS = "statemachine.tuner.actions"
# What a run that the tuner ends early still does, in Lightning's order: the teardown hooks, the loggers'
# success, the profiler's report, then the internal teardown.
_EXIT_CHAIN = ("call_teardown_hooks", "finalize_loggers_success", "describe_profiler", "teardown_internals")
_SEARCHES = {"lr_find": "lr_find_requested", "scale_batch_size": "batch_size_search_requested"}
# The batch size of validate/test/predict: searched on entry, whenever a BatchSizeFinder is among the callbacks.
_EVALUATIONS = {
    "validate": ("validating", TrainerFn.VALIDATING, RunningStage.VALIDATING),
    "test": ("testing", TrainerFn.TESTING, RunningStage.TESTING),
    "predict": ("predicting", TrainerFn.PREDICTING, RunningStage.PREDICTING),
}


def _extension(table: MachineTable) -> dict[str, object]:
    interrupt = table.by_key["interrupt: fitting.setup -> interrupted"]
    states = []
    transitions = []
    for search, requested in _SEARCHES.items():
        name = f"tuning.{search}"
        states.append(
            StateSpec(
                name=name,
                status=TrainerStatus.RUNNING,
                fn=TrainerFn.FITTING,
                stage=RunningStage.TRAINING,
                handler=f"run_{search}",
                doc=f"the {search} search: a few training steps, then the state saved before it is restored",
            )
        )
        transitions += [
            TransitionSpec(
                trigger="begin", source="fitting.setup", dest=name, guard=requested, before=("save_tuning_state",)
            ),
            TransitionSpec(
                trigger="searched",
                source=name,
                dest="finished",
                guard="tuner_exits",
                before=("restore_tuning_state", *_EXIT_CHAIN),
            ),
            TransitionSpec(
                trigger="searched",
                source=name,
                dest="fitting.setup",
                guard="not tuner_exits",
                before=("restore_tuning_state",),
            ),
            interrupt.model_copy(update={"source": name, "before": ("restore_tuning_state", *interrupt.before)}),
        ]
    for trigger, (running, fn, stage) in _EVALUATIONS.items():
        name = f"tuning.{trigger}_batch_size"
        states.append(
            StateSpec(
                name=name,
                status=TrainerStatus.RUNNING,
                fn=fn,
                stage=stage,
                handler="run_scale_batch_size",
                doc=f"the batch size search of {trigger}: a few batches per size, then the saved state is restored",
            )
        )
        transitions += [
            TransitionSpec(
                trigger=trigger,
                source=source,
                dest=name,
                guard="batch_size_finder_present",
                after=(*table.by_key[f"{trigger}: {source} -> {running}"].after, "save_tuning_state"),
            )
            for source in RESTING_SOURCES
        ]
        transitions += [
            TransitionSpec(
                trigger="searched",
                source=name,
                dest="finished",
                guard="tuner_exits",
                before=("restore_tuning_state", *_EXIT_CHAIN),
            ),
            TransitionSpec(
                trigger="searched",
                source=name,
                dest=running,
                guard="not tuner_exits",
                before=("restore_tuning_state",),
            ),
            interrupt.model_copy(update={"source": name, "before": ("restore_tuning_state", *interrupt.before)}),
        ]
    names = ("lr_find_requested", "batch_size_search_requested", "batch_size_finder_present", "tuner_exits")
    return {
        "states": states,
        "transitions": transitions,
        "guards": {name: f"{_ACTIONS}:{name}" for name in names},
        "callbacks": {name: f"{_ACTIONS}:{name}" for name in ("save_tuning_state", "restore_tuning_state")},
        "handlers": {f"run_{search}": f"{_ACTIONS}:run_{search}" for search in _SEARCHES},
    }


_TUNED: dict[str, MachineTable] = {}


def with_tuning(table: MachineTable) -> MachineTable:
    """`table` with the tuner's states (the same table when it has them already)."""
    if "tuning.lr_find" in table.by_name:
        return table
    tuned = _TUNED.get(table.digest)
    if tuned is None:
        tuned = _TUNED[table.digest] = table.extend(name=f"{table.name}+tuner", **_extension(table))  # type: ignore[arg-type]
    return tuned


TUNER_TABLE = with_tuning(TABLE)
"""The built-in table with the tuner's states (`--table statemachine.tuner:TUNER_TABLE` for the diagram and the
history check)."""
