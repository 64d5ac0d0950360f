"""The tuner's states, added to a trainer's table with `MachineTable.extend`.

A finder callback asks for a search at fit start; the `begin` edge out of `fitting.setup` then enters the
search's state instead of the sanity check (the model, optimizers and data hooks are all set up by then). For
validate/test/predict, a `BatchSizeFinder` among the callbacks makes the entry edge go to the search's state,
after the same setup chain. The edge in saves the model and trainer state; every edge out restores it: on to the
run (`fitting.setup` for the next search or the fit itself, or `validating`/`testing`/`predicting`), to
`finished` when the `Tuner` asked for the search alone, or to `interrupted` on a failure.
"""

from __future__ import annotations

from statemachine.engine.enums import TrainerStatus
from statemachine.engine.table import RESTING_SOURCES, TABLE, MachineTable, StateSpec, TransitionSpec, module_paths

_ACTIONS = "statemachine.tuner.actions"
# What a run that the tuner ends early still does, in Lightning's order: the teardown hooks, the loggers'
# success, the profiler's report, then the internal teardown.
_EXIT_CHAIN = ("call_teardown_hooks", "finalize_loggers_success", "describe_profiler", "teardown_internals")
_SEARCHES = {"lr_find": "lr_find_requested", "scale_batch_size": "batch_size_search_requested"}
# The batch size of validate/test/predict: searched on entry, whenever a BatchSizeFinder is among the callbacks.
_EVALUATIONS = {"validate": "validating", "test": "testing", "predict": "predicting"}


def _search_state(
    table: MachineTable, name: str, like: str, handler: str, doc: str, back_to: str
) -> tuple[StateSpec, list[TransitionSpec]]:
    """A search's state, running as the state `like` does (its function and stage), and its edges out: to
    `finished` when the `Tuner` asked for the search alone, back to `back_to` otherwise, to `interrupted` on a
    failure; every one restores the state saved on the way in."""
    model = table.by_name[like]
    state = StateSpec(name=name, status=TrainerStatus.RUNNING, fn=model.fn, stage=model.stage, handler=handler, doc=doc)
    restore = ("restore_tuning_state",)
    interrupt = table.by_key["interrupt: fitting.setup -> interrupted"]
    return state, [
        TransitionSpec(
            trigger="searched", source=name, dest="finished", guard="tuner_exits", before=(*restore, *_EXIT_CHAIN)
        ),
        TransitionSpec(trigger="searched", source=name, dest=back_to, guard="not tuner_exits", before=restore),
        interrupt.model_copy(update={"source": name, "before": (*restore, *interrupt.before)}),
    ]


def _tuned(table: MachineTable) -> MachineTable:
    states: list[StateSpec] = []
    transitions: list[TransitionSpec] = []
    for search, requested in _SEARCHES.items():
        name = f"tuning.{search}"
        doc = f"the {search} search: a few training steps, then the state saved before it is restored"
        state, edges_out = _search_state(table, name, "fitting.training", f"run_{search}", doc, "fitting.setup")
        states.append(state)
        transitions.append(
            TransitionSpec(
                trigger="begin", source="fitting.setup", dest=name, guard=requested, before=("save_tuning_state",)
            )
        )
        transitions += edges_out
    for trigger, running in _EVALUATIONS.items():
        name = f"tuning.{trigger}_batch_size"
        doc = f"the batch size search of {trigger}: a few batches per size, then the saved state is restored"
        state, edges_out = _search_state(table, name, running, "run_scale_batch_size", doc, running)
        states.append(state)
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
        transitions += edges_out
    return table.extend(
        name=f"{table.name}+tuner",
        states=states,
        transitions=transitions,
        guards=module_paths(
            _ACTIONS, "lr_find_requested", "batch_size_search_requested", "batch_size_finder_present", "tuner_exits"
        ),
        callbacks=module_paths(_ACTIONS, "save_tuning_state", "restore_tuning_state"),
        handlers=module_paths(_ACTIONS, *(f"run_{search}" for search in _SEARCHES)),
    )


_TUNED: dict[str, MachineTable] = {}


def with_tuning(table: MachineTable) -> MachineTable:
    """`table` with the tuner's states (the same table when it has them already)."""
    if "tuning.lr_find" in table.by_name:
        return table
    tuned = _TUNED.get(table.digest)
    if tuned is None:
        tuned = _TUNED[table.digest] = _tuned(table)
    return tuned


TUNER_TABLE = with_tuning(TABLE)
"""The built-in table with the tuner's states (`--table statemachine.tuner:TUNER_TABLE` for the diagram and the
history check)."""
