"""The trainer's machine as data: states, transitions and the names of what runs on them.

This table is the single source of truth for the runtime machine (`statemachine.engine.machine`), the diagrams
(`statemachine.engine.diagram`), transition coverage and the history's legality check. It is plain data: guards,
callbacks and handlers appear by name, each name mapped to an import path (`module:attribute`). The paths are
resolved where the table is bound to a trainer (`statemachine.engine.binding`), so this module imports no torch and
nothing that imports the Trainer.

`MachineTable.extend` derives a new table from this one (users' own states, edges, guards and callbacks); the
result is validated exactly like the built-in table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from statemachine.engine.enums import RunningStage, TrainerFn, TrainerStatus

SEPARATOR = "."

Collective = Literal["any", "all"]


class StateSpec(BaseModel):
    """One leaf state. `resting` states end the driver loop; every other state has a stage handler."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: TrainerStatus
    fn: TrainerFn | None = None
    stage: RunningStage | None = None
    resting: bool = False
    handler: str | None = None
    doc: str = ""

    @property
    def parent(self) -> str | None:
        head, _, _ = self.name.rpartition(SEPARATOR)
        return head or None

    @property
    def leaf(self) -> str:
        return self.name.rpartition(SEPARATOR)[2]


class GuardSpec(BaseModel):
    """A named predicate over the trainer.

    `collective` marks a guard that reads rank-local values (a flag one rank's code sets, a clock): in a
    multi-process run its outcome is reduced across ranks ("any": true if one rank says so; "all": only if every
    rank does) at that one decision point, so every rank takes the same edge.

    `requires` names a guard this one cannot pass without, and that holds or fails for a whole stretch of a loop
    (an epoch): a loop asks it once for the stretch, and polls nothing when no candidate can pass
    (`Flow.may_pass`).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    path: str
    collective: Collective | None = None
    requires: str | None = None
    doc: str = ""


class TransitionSpec(BaseModel):
    """One edge. `guard` is a guard name, optionally prefixed with `not `.

    `before` callbacks run while the machine is still in `source` (so a failure there is interrupted from
    the source); `after` callbacks run once the machine is in `dest`. On a `best_effort` edge every callback
    runs even when an earlier one fails: the interrupt path must always reach teardown and the history dump.
    """

    model_config = ConfigDict(frozen=True)

    trigger: str
    source: str
    dest: str
    guard: str | None = None
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    best_effort: bool = False

    @property
    def guard_name(self) -> str | None:
        return None if self.guard is None else self.guard.removeprefix("not ")

    @property
    def guard_negated(self) -> bool:
        return self.guard is not None and self.guard.startswith("not ")

    @property
    def callbacks(self) -> tuple[str, ...]:
        return self.before + self.after

    @property
    def key(self) -> str:
        """A stable identifier used by coverage and history: `trigger: source -> dest [guard]`."""
        edge = f"{self.trigger}: {self.source} -> {self.dest}"
        return edge if self.guard is None else f"{edge} [{self.guard}]"


class MachineTable(BaseModel):
    model_config = ConfigDict(frozen=True, ignored_types=(cached_property,))

    initial: str
    states: tuple[StateSpec, ...]
    transitions: tuple[TransitionSpec, ...]
    guards: tuple[GuardSpec, ...]
    callbacks: dict[str, str]
    handlers: dict[str, str]
    name: str = "trainer"

    @cached_property
    def by_name(self) -> dict[str, StateSpec]:
        return {state.name: state for state in self.states}

    @cached_property
    def guard_specs(self) -> dict[str, GuardSpec]:
        return {guard.name: guard for guard in self.guards}

    @cached_property
    def by_key(self) -> dict[str, TransitionSpec]:
        return {t.key: t for t in self.transitions}

    @cached_property
    def digest(self) -> str:
        """A hash of the table, stored in history dumps so a dump can be matched to the table it ran on."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    def candidates(self, trigger: str, source: str) -> list[TransitionSpec]:
        """The transitions the machine tries, in order, when `trigger` fires in `source`."""
        return [t for t in self.transitions if t.trigger == trigger and t.source == source]

    @property
    def triggers(self) -> list[str]:
        return list(dict.fromkeys(t.trigger for t in self.transitions))

    def extend(
        self,
        *,
        name: str | None = None,
        states: Sequence[StateSpec] = (),
        transitions: Sequence[TransitionSpec] = (),
        remove: Iterable[str] = (),
        add_before: Mapping[str, Sequence[str]] | None = None,
        add_after: Mapping[str, Sequence[str]] | None = None,
        guards: Mapping[str, Callable[..., Any] | str | GuardSpec] | None = None,
        callbacks: Mapping[str, Callable[..., Any] | str] | None = None,
        handlers: Mapping[str, Callable[..., Any] | str] | None = None,
    ) -> MachineTable:
        """A new table: this one plus users' states, edges, guards, callbacks and handlers.

        - `states`: new states; each running one gets this table's interrupt edge unless `transitions` declares one.
        - `transitions`: new edges. A new edge is tried before this table's edges for the same trigger and source.
        - `remove`: keys (`trigger: source -> dest [guard]`) of edges to drop.
        - `add_before` / `add_after`: callback names appended to the `before` / `after` list of existing edges,
          by key.
        - `guards`, `callbacks`, `handlers`: the names used above, each a module-level function (or its
          `module:attribute` path); a guard may be a `GuardSpec` to mark it collective.
        The result is validated like the built-in table; errors name every problem.
        """
        problems: list[str] = []
        removed = set(remove)
        problems += [f"remove: no transition {key!r}" for key in removed if key not in self.by_key]
        edits = {"add_before": add_before or {}, "add_after": add_after or {}}
        for label, edit in edits.items():
            problems += [f"{label}: no transition {key!r}" for key in edit if key not in self.by_key]
        if problems:
            raise ValueError(f"cannot extend table {self.name!r}:\n  " + "\n  ".join(problems))
        kept = [
            t.model_copy(
                update={
                    "before": t.before + tuple(edits["add_before"].get(t.key, ())),
                    "after": t.after + tuple(edits["add_after"].get(t.key, ())),
                }
            )
            for t in self.transitions
            if t.key not in removed
        ]
        declared = [*transitions, *self._interrupt_edges_for(states, transitions)]
        new_guards = {**self.guard_specs, **{key: _guard_spec(key, value) for key, value in (guards or {}).items()}}
        try:
            return MachineTable(
                name=name or f"{self.name}+",
                initial=self.initial,
                states=(*self.states, *states),
                transitions=tuple(_merge_candidates(kept, declared)),
                guards=tuple(new_guards.values()),
                callbacks={**self.callbacks, **{key: _path_of(value) for key, value in (callbacks or {}).items()}},
                handlers={**self.handlers, **{key: _path_of(value) for key, value in (handlers or {}).items()}},
            )
        except ValidationError as error:
            raise ValueError("\n".join(item["msg"].removeprefix("Value error, ") for item in error.errors())) from None

    def _interrupt_edges_for(
        self, states: Sequence[StateSpec], transitions: Sequence[TransitionSpec]
    ) -> list[TransitionSpec]:
        template = next((t for t in self.transitions if t.trigger == "interrupt"), None)
        if template is None:
            return []
        declared = {t.source for t in transitions if t.trigger == "interrupt"}
        return [
            template.model_copy(update={"source": state.name})
            for state in states
            if not state.resting and state.name not in declared
        ]

    @model_validator(mode="after")
    def _check_shape(self) -> MachineTable:
        names = [state.name for state in self.states]
        problems = [f"duplicate state {name!r}" for name in sorted(set(names)) if names.count(name) > 1]
        if self.initial not in names:
            problems.append(f"initial state {self.initial!r} is not declared")
        for t in self.transitions:
            problems += [f"{t.key} uses undeclared state {s!r}" for s in (t.source, t.dest) if s not in names]
        problems += self._name_problems()
        problems += self._handler_problems()
        problems += self._dead_candidates()
        if not problems:
            problems += self._reachability_problems(names)
        if problems:
            raise ValueError(f"invalid machine table {self.name!r}:\n  " + "\n  ".join(problems))
        return self

    def _name_problems(self) -> list[str]:
        problems = []
        guard_names = {guard.name for guard in self.guards}
        for t in self.transitions:
            if t.guard_name is not None and t.guard_name not in guard_names:
                problems.append(f"{t.key}: unknown guard {t.guard_name!r}; known guards: {sorted(guard_names)}")
            unknown = [name for name in t.callbacks if name not in self.callbacks]
            if unknown:
                problems.append(f"{t.key}: unknown callbacks {unknown}; declare them in the table's callbacks")
        for guard in self.guards:
            if guard.requires is not None and guard.requires not in guard_names:
                problems.append(f"guard {guard.name!r} requires unknown guard {guard.requires!r}")
        keys = [t.key for t in self.transitions]
        problems += [f"duplicate transition {key!r}" for key in sorted(set(keys)) if keys.count(key) > 1]
        return problems

    def _handler_problems(self) -> list[str]:
        problems = []
        for state in self.states:
            if state.resting and state.handler is not None:
                problems.append(f"resting state {state.name!r} must not have a handler")
            if not state.resting and state.handler not in self.handlers:
                problems.append(f"state {state.name!r} has no known handler (got {state.handler!r})")
        return problems

    def _dead_candidates(self) -> list[str]:
        """A candidate can never fire when an earlier one for the same trigger and source always wins first."""
        problems = []
        for trigger in self.triggers:
            for source in dict.fromkeys(t.source for t in self.transitions if t.trigger == trigger):
                seen: set[str | None] = set()
                for candidate in self.candidates(trigger, source):
                    if None in seen or candidate.guard in seen:
                        problems.append(f"{candidate.key} can never fire: an earlier candidate always wins first")
                    seen.add(candidate.guard)
        return problems

    def _reachability_problems(self, names: list[str]) -> list[str]:
        """Every state is reachable, and every running state can end normally: reach a resting state without
        an `interrupt` (an interrupt edge leaves every running state, so it proves nothing)."""
        edges = [(t.source, t.dest) for t in self.transitions]
        reachable = _closure({self.initial}, edges)
        problems = [f"state {name!r} is unreachable from {self.initial!r}" for name in names if name not in reachable]
        resting = {state.name for state in self.states if state.resting}
        normal = [(t.source, t.dest) for t in self.transitions if t.trigger != "interrupt"]
        for name in names:
            if name not in resting and not _closure({name}, normal) & resting:
                problems.append(f"state {name!r} cannot reach a resting state without an interrupt")
        return problems


def _closure(start: set[str], edges: Iterable[tuple[str, str]]) -> set[str]:
    edges = list(edges)
    seen = set(start)
    frontier = list(start)
    while frontier:
        node = frontier.pop()
        for source, dest in edges:
            if source == node and dest not in seen:
                seen.add(dest)
                frontier.append(dest)
    return seen


def _merge_candidates(kept: list[TransitionSpec], added: list[TransitionSpec]) -> list[TransitionSpec]:
    """Insert each added edge before the first kept edge with its trigger and source (or at the end)."""
    merged = list(kept)
    for edge in added:
        index = next(
            (i for i, t in enumerate(merged) if t in kept and (t.trigger, t.source) == (edge.trigger, edge.source)),
            len(merged),
        )
        merged.insert(index, edge)
    return merged


def _path_of(value: Callable[..., Any] | str) -> str:
    """`module:attribute` for a module-level function (checked when the table is bound)."""
    if isinstance(value, str):
        if ":" not in value:
            raise ValueError(f"{value!r} is not an import path; write it as 'module:attribute'")
        return value
    qualname = getattr(value, "__qualname__", "")
    module = getattr(value, "__module__", None)
    if not module or not qualname or "<" in qualname:
        raise ValueError(
            f"{value!r} cannot be named by an import path (lambdas and nested functions cannot); "
            "define it at module level"
        )
    return f"{module}:{qualname}"


def _guard_spec(name: str, value: Callable[..., Any] | str | GuardSpec) -> GuardSpec:
    if isinstance(value, GuardSpec):
        if value.name != name:
            raise ValueError(f"guard {name!r} is given a GuardSpec named {value.name!r}")
        return value
    return GuardSpec(name=name, path=_path_of(value))


def module_paths(module: str, *names: str) -> dict[str, str]:
    """`{name: "module:name"}`: names a table binds to functions of one module."""
    return {name: f"{module}:{name}" for name in names}


RESTING_SOURCES = ("idle", "finished", "interrupted")

_SETUP_CHAIN = (
    "connect_model",
    "setup_profiler",
    "configure_callbacks",
    "prepare_data",
    "call_setup_hooks",
    "configure_model",
    "setup_strategy",
    "restore_weights_and_callbacks",
)
_FIT_START_CHAIN = (
    "call_on_fit_start",
    "log_hyperparams",
    "restore_training_state",
    "release_checkpoint",
    "register_signal_handlers",
)
_EVALUATION_START_CHAIN = ("log_hyperparams", "release_checkpoint", "register_signal_handlers")
_ENTRY = {
    "fit": ("fitting.setup", (*_SETUP_CHAIN, "configure_optimizers", *_FIT_START_CHAIN)),
    **{
        trigger: (state, (*_SETUP_CHAIN, *_EVALUATION_START_CHAIN))
        for trigger, state in (("validate", "validating"), ("test", "testing"), ("predict", "predicting"))
    },
}
ENTRY_TRIGGERS = tuple(_ENTRY)  # the trainer functions, each a run's first event
_TEARDOWN_CHAIN = (
    "teardown_internals",
    "call_teardown_hooks",
    "send_flow_to_trackers",
    "finalize_loggers_success",
    "describe_profiler",
)
# fit's end: the same teardown, with on_fit_end between the internals' teardown and the teardown hooks
_FIT_END_CHAIN = ("say_why_fit_stopped", _TEARDOWN_CHAIN[0], "call_on_fit_end", *_TEARDOWN_CHAIN[1:])
_INTERRUPT_CHAIN = (
    "ignore_sigint",
    "notify_peers",
    "call_on_exception_hooks",
    "strategy_on_exception",
    "send_flow_to_trackers",
    "finalize_loggers_failed",
    "teardown_profiler",
    "teardown_internals",
    "dump_history",
)

_STATES = (
    StateSpec(name="idle", status=TrainerStatus.INITIALIZING, resting=True, doc="constructed, nothing ran yet"),
    StateSpec(
        name="fitting.setup",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=RunningStage.TRAINING,
        handler="fit_setup",
    ),
    StateSpec(
        name="fitting.sanity_checking",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=RunningStage.SANITY_CHECKING,
        handler="sanity_checking",
    ),
    StateSpec(
        name="fitting.train_setup",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=RunningStage.TRAINING,
        handler="train_setup",
        doc="loads the training data",
    ),
    StateSpec(
        name="fitting.val_setup",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=RunningStage.VALIDATING,
        handler="val_setup",
        doc="requests the validation loaders before training starts, as a validation would",
    ),
    StateSpec(
        name="fitting.between_epochs",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=RunningStage.TRAINING,
        handler="between_epochs",
        doc="no epoch in progress: the table decides whether fit stops or runs the next epoch",
    ),
    StateSpec(
        name="fitting.training",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=RunningStage.TRAINING,
        handler="training",
        doc="an epoch's batches run; it pauses here while a validation runs and continues after it",
    ),
    StateSpec(
        name="fitting.validating",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=RunningStage.VALIDATING,
        handler="fit_validating",
    ),
    StateSpec(
        name="validating",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.VALIDATING,
        stage=RunningStage.VALIDATING,
        handler="validating",
    ),
    StateSpec(
        name="testing",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.TESTING,
        stage=RunningStage.TESTING,
        handler="testing",
    ),
    StateSpec(
        name="predicting",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.PREDICTING,
        stage=RunningStage.PREDICTING,
        handler="predicting",
    ),
    StateSpec(name="finished", status=TrainerStatus.FINISHED, resting=True, doc="the last run returned normally"),
    StateSpec(name="interrupted", status=TrainerStatus.INTERRUPTED, resting=True, doc="the last run raised"),
)

_TRANSITIONS = (
    *(
        TransitionSpec(trigger=trigger, source=source, dest=dest, after=chain)
        for trigger, (dest, chain) in _ENTRY.items()
        for source in RESTING_SOURCES
    ),
    # Where fit starts is named by the resume point the fit edge restored: a resume inside an epoch (or inside
    # one of its validations) continues that epoch at once, without a sanity check.
    TransitionSpec(trigger="begin", source="fitting.setup", dest="fitting.train_setup", guard="resumes_inside_epoch"),
    TransitionSpec(
        trigger="begin",
        source="fitting.setup",
        dest="fitting.sanity_checking",
        guard="should_sanity_check",
        before=("save_rng_state",),
    ),
    TransitionSpec(
        trigger="begin", source="fitting.setup", dest="fitting.train_setup", guard="not should_sanity_check"
    ),
    TransitionSpec(
        trigger="sanity_check_done",
        source="fitting.sanity_checking",
        dest="fitting.train_setup",
        before=("reset_sanity_results", "restore_rng_state"),
    ),
    # The training data is loaded: stop at once (nothing to train, or the checkpoint's fit is already done), continue
    # the saved epoch at its next batch, or start training at an epoch boundary.
    TransitionSpec(
        trigger="train_ready",
        source="fitting.train_setup",
        dest="finished",
        guard="fit_done",
        before=_FIT_END_CHAIN,
    ),
    # The first epoch validates and no sanity check requested its loaders: they are requested now, while validating.
    TransitionSpec(
        trigger="train_ready",
        source="fitting.train_setup",
        dest="fitting.val_setup",
        guard="needs_val_loaders",
    ),
    TransitionSpec(
        trigger="train_ready",
        source="fitting.train_setup",
        dest="fitting.training",
        guard="resumes_mid_epoch",
        after=("start_training",),
    ),
    TransitionSpec(
        trigger="val_ready",
        source="fitting.val_setup",
        dest="fitting.training",
        guard="resumes_mid_epoch",
        after=("start_training",),
    ),
    TransitionSpec(
        trigger="val_ready",
        source="fitting.val_setup",
        dest="fitting.between_epochs",
        guard="not resumes_mid_epoch",
        after=("start_training",),
    ),
    TransitionSpec(
        trigger="train_ready",
        source="fitting.train_setup",
        dest="fitting.between_epochs",
        guard="not fit_done",
        after=("start_training",),
    ),
    # Before each epoch (the first one too, after on_train_start): stop, or run the epoch.
    TransitionSpec(
        trigger="epoch_boundary",
        source="fitting.between_epochs",
        dest="finished",
        guard="fit_done",
        before=("end_training", *_FIT_END_CHAIN),
    ),
    TransitionSpec(
        trigger="epoch_boundary", source="fitting.between_epochs", dest="fitting.training", guard="not fit_done"
    ),
    # The epoch pauses for each validation it schedules, and goes on from that batch after it. Polled after every
    # batch; one edge per rule that schedules a validation, asked in this order.
    *(
        TransitionSpec(trigger="val_check", source="fitting.training", dest="fitting.validating", guard=guard)
        for guard in ("validates_at_epoch_end", "validates_before_stop", "val_time_elapsed", "val_batches_counted")
    ),
    TransitionSpec(trigger="validation_done", source="fitting.validating", dest="fitting.training"),
    TransitionSpec(trigger="epoch_done", source="fitting.training", dest="fitting.between_epochs"),
    *(
        TransitionSpec(trigger="finish", source=source, dest="finished", before=_TEARDOWN_CHAIN)
        for source in ("validating", "testing", "predicting")
    ),
    *(
        TransitionSpec(
            trigger="interrupt",
            source=state.name,
            dest="interrupted",
            after=_INTERRUPT_CHAIN,
            best_effort=True,
        )
        for state in _STATES
        if not state.resting
    ),
)

_GUARDS = (
    GuardSpec(
        name="resumes_inside_epoch",
        path="statemachine.guards:resumes_inside_epoch",
        doc="the restored checkpoint was saved inside an epoch or one of its validations",
    ),
    GuardSpec(
        name="resumes_mid_epoch",
        path="statemachine.guards:resumes_mid_epoch",
        doc="the restored checkpoint continues its epoch at the next batch (saved mid-epoch, or in a validation)",
    ),
    GuardSpec(
        name="should_sanity_check",
        path="statemachine.guards:should_sanity_check",
        doc="validation is enabled and sanity steps are requested",
    ),
    GuardSpec(
        name="needs_val_loaders",
        path="statemachine.guards:needs_val_loaders",
        doc="the first epoch validates and its loaders were not requested yet",
    ),
    GuardSpec(
        name="fit_done",
        path="statemachine.guards:fit_done",
        collective="any",
        doc="a stop condition holds; its value is the reason",
    ),
    GuardSpec(
        name="epoch_validates",
        path="statemachine.guards:epoch_validates",
        doc="the running epoch validates (check_val_every_n_epoch, validation enabled): set at its start",
    ),
    # The val_check guards need no collective: their rank-local inputs (should_stop, the clock) are agreed per batch.
    # Each requires a validating epoch: an epoch that does not validate polls none of them.
    GuardSpec(
        name="validates_at_epoch_end",
        path="statemachine.guards:validates_at_epoch_end",
        requires="epoch_validates",
        doc="the epoch's last batch ran, and its end is not counted in batches (data without a length)",
    ),
    GuardSpec(
        name="validates_before_stop",
        path="statemachine.guards:validates_before_stop",
        requires="epoch_validates",
        doc="should_stop is set and the minimums are met: validate once more before fit stops",
    ),
    GuardSpec(
        name="val_time_elapsed",
        path="statemachine.guards:val_time_elapsed",
        requires="epoch_validates",
        doc="validation is scheduled by time and the interval has passed",
    ),
    GuardSpec(
        name="val_batches_counted",
        path="statemachine.guards:val_batches_counted",
        requires="epoch_validates",
        doc="the val_check_interval-th batch ran (at 1.0, the epoch's last of a loader with a length)",
    ),
)

# Every callback the transitions name, in the order they first appear; all live in statemachine.actions.
_CALLBACKS = module_paths(
    "statemachine.actions", *dict.fromkeys(n for t in _TRANSITIONS for n in (*t.before, *t.after))
)

_HANDLERS = {
    "fit_setup": "stages.fit_setup:run_fit_setup",
    "sanity_checking": "stages.evaluation:run_sanity_check",
    "train_setup": "stages.training:run_train_setup",
    "val_setup": "stages.evaluation:run_val_setup",
    "between_epochs": "stages.training:run_between_epochs",
    "training": "stages.training:run_training",
    "fit_validating": "stages.evaluation:run_fit_validation",
    "validating": "stages.evaluation:run_validate",
    "testing": "stages.evaluation:run_test",
    "predicting": "stages.prediction:run_predict",
}

TABLE = MachineTable(
    initial="idle",
    states=_STATES,
    transitions=_TRANSITIONS,
    guards=_GUARDS,
    callbacks=_CALLBACKS,
    handlers=_HANDLERS,
)
