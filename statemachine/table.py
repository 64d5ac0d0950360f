"""The trainer's machine as data: states and transitions, validated when this module is imported.

This table is the single source of truth for the runtime machine (`statemachine.machine`), the diagrams
(`statemachine.diagram`), transition coverage and the history's legality check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import cached_property

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from statemachine import actions, guards
from statemachine.enums import RunningStage, TrainerFn, TrainerStatus

SEPARATOR = "."


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
        """A stable identifier used by coverage and history: `trigger: source -> dest`."""
        return f"{self.trigger}: {self.source} -> {self.dest}"

    @field_validator("guard")
    @classmethod
    def _guard_resolves(cls, value: str | None) -> str | None:
        if value is not None and value.removeprefix("not ") not in guards.GUARDS:
            raise ValueError(f"unknown guard {value!r}; known guards: {sorted(guards.GUARDS)}")
        return value

    @field_validator("before", "after")
    @classmethod
    def _callbacks_resolve(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in actions.ACTIONS]
        if unknown:
            raise ValueError(f"unknown callbacks {unknown}; known callbacks: {sorted(actions.ACTIONS)}")
        return value


class MachineTable(BaseModel):
    model_config = ConfigDict(frozen=True, ignored_types=(cached_property,))

    initial: str
    states: tuple[StateSpec, ...]
    transitions: tuple[TransitionSpec, ...]

    @cached_property
    def by_name(self) -> dict[str, StateSpec]:
        return {state.name: state for state in self.states}

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

    @model_validator(mode="after")
    def _check_shape(self) -> MachineTable:
        names = [state.name for state in self.states]
        problems = [f"duplicate state {name!r}" for name in set(names) if names.count(name) > 1]
        if self.initial not in names:
            problems.append(f"initial state {self.initial!r} is not declared")
        for t in self.transitions:
            problems += [f"{t.key} uses undeclared state {s!r}" for s in (t.source, t.dest) if s not in names]
        problems += self._handler_problems()
        problems += self._dead_candidates()
        if not problems:
            problems += self._reachability_problems(names)
        if problems:
            raise ValueError("invalid machine table:\n  " + "\n  ".join(problems))
        return self

    def _handler_problems(self) -> list[str]:
        from statemachine.handlers import HANDLERS

        problems = []
        for state in self.states:
            if state.resting and state.handler is not None:
                problems.append(f"resting state {state.name!r} must not have a handler")
            if not state.resting and state.handler not in HANDLERS:
                problems.append(f"state {state.name!r} has no known handler (got {state.handler!r})")
        return problems

    def _dead_candidates(self) -> list[str]:
        problems = []
        for trigger in self.triggers:
            for source in dict.fromkeys(t.source for t in self.transitions if t.trigger == trigger):
                options = self.candidates(trigger, source)
                for earlier in options[:-1]:
                    if earlier.guard is None:
                        problems.append(f"{earlier.key} is unguarded, so the candidates after it never fire")
        return problems

    def _reachability_problems(self, names: list[str]) -> list[str]:
        edges = [(t.source, t.dest) for t in self.transitions]
        reachable = _closure({self.initial}, edges)
        problems = [f"state {name!r} is unreachable from {self.initial!r}" for name in names if name not in reachable]
        resting = {state.name for state in self.states if state.resting}
        for name in names:
            if not (_closure({name}, edges) & (resting - {name}) or name in resting):
                problems.append(f"state {name!r} cannot reach a resting state")
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


RESTING_SOURCES = ("idle", "finished", "interrupted")

_SETUP_CHAIN = (
    "connect_model",
    "configure_callbacks",
    "prepare_data",
    "call_setup_hooks",
    "configure_model",
    "restore_weights_and_callbacks",
    "setup_strategy",
)
_FIT_START_CHAIN = (
    "call_on_fit_start",
    "log_hyperparams",
    "restore_training_state",
    "release_checkpoint",
    "register_signal_handlers",
)
_ENTRY = {
    "fit": ("fitting.setup", (*_SETUP_CHAIN, "configure_optimizers", *_FIT_START_CHAIN)),
    "validate": ("validating", (*_SETUP_CHAIN, "release_checkpoint", "register_signal_handlers")),
    "test": ("testing", (*_SETUP_CHAIN, "release_checkpoint", "register_signal_handlers")),
    "predict": ("predicting", (*_SETUP_CHAIN, "release_checkpoint", "register_signal_handlers")),
}
_INTERRUPT_CHAIN = (
    "ignore_sigint",
    "notify_peers",
    "call_on_exception_hooks",
    "strategy_on_exception",
    "finalize_loggers_failed",
    "teardown_internals",
    "dump_history",
)

_RUNNING = RunningStage
_STATES = (
    StateSpec(name="idle", status=TrainerStatus.INITIALIZING, resting=True, doc="constructed, nothing ran yet"),
    StateSpec(
        name="fitting.setup",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=_RUNNING.TRAINING,
        handler="fit_setup",
    ),
    StateSpec(
        name="fitting.sanity_checking",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=_RUNNING.SANITY_CHECKING,
        handler="sanity_checking",
    ),
    StateSpec(
        name="fitting.training",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=_RUNNING.TRAINING,
        handler="training",
    ),
    StateSpec(
        name="fitting.validating",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.FITTING,
        stage=_RUNNING.VALIDATING,
        handler="fit_validating",
    ),
    StateSpec(
        name="validating",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.VALIDATING,
        stage=_RUNNING.VALIDATING,
        handler="validating",
    ),
    StateSpec(
        name="testing",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.TESTING,
        stage=_RUNNING.TESTING,
        handler="testing",
    ),
    StateSpec(
        name="predicting",
        status=TrainerStatus.RUNNING,
        fn=TrainerFn.PREDICTING,
        stage=_RUNNING.PREDICTING,
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
    TransitionSpec(
        trigger="begin",
        source="fitting.setup",
        dest="fitting.sanity_checking",
        guard="should_sanity_check",
        before=("save_rng_state",),
    ),
    TransitionSpec(trigger="begin", source="fitting.setup", dest="fitting.training"),
    TransitionSpec(
        trigger="sanity_check_done",
        source="fitting.sanity_checking",
        dest="fitting.training",
        before=("reset_sanity_results", "restore_rng_state"),
    ),
    TransitionSpec(trigger="val_check", source="fitting.training", dest="fitting.validating", guard="should_check_val"),
    TransitionSpec(trigger="validation_done", source="fitting.validating", dest="fitting.training"),
    TransitionSpec(trigger="epoch_end", source="fitting.training", dest="fitting.training", guard="not fit_done"),
    TransitionSpec(
        trigger="stop",
        source="fitting.training",
        dest="finished",
        guard="fit_done",
        before=(
            "end_training",
            "teardown_internals",
            "call_on_fit_end",
            "call_teardown_hooks",
            "finalize_loggers_success",
        ),
    ),
    *(
        TransitionSpec(
            trigger="finish",
            source=source,
            dest="finished",
            before=("teardown_internals", "call_teardown_hooks", "finalize_loggers_success"),
        )
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

TABLE = MachineTable(initial="idle", states=_STATES, transitions=_TRANSITIONS)
