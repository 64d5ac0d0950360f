"""The runtime machine: the table turned into a plain `transitions` hierarchical machine.

It is bound to a small `Flow` object, not to the Trainer, so the Trainer's namespace stays free of generated
trigger and helper methods. Every fired event leaves a history record with its guard outcomes and callback
timings, and counts towards transition coverage.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from transitions.core import MachineError
from transitions.extensions.nesting import HierarchicalMachine, NestedState

from statemachine import distributed
from statemachine.actions import ACTIONS
from statemachine.coverage import COVERAGE, TransitionCoverage
from statemachine.guards import GUARDS
from statemachine.history import CallbackRecord, ExceptionRecord, GuardRecord, History, TransitionRecord
from statemachine.table import SEPARATOR, TABLE, MachineTable, StateSpec, TransitionSpec

if TYPE_CHECKING:
    from statemachine.trainer import Trainer

# At INFO, transitions' own logging costs several times the transition itself.
logging.getLogger("transitions").setLevel(logging.WARNING)
_log = logging.getLogger(__name__)


class FlowError(RuntimeError):
    """An event the table does not allow in the current state: a bug in the trainer, never a user error."""


class _DotState(NestedState):
    separator = SEPARATOR


class _Machine(HierarchicalMachine):
    state_cls = _DotState


class Flow:
    """Holds the machine's state for one trainer and fires events on it."""

    def __init__(self, trainer: Trainer, table: MachineTable = TABLE, coverage: TransitionCoverage = COVERAGE):
        self.trainer = trainer
        self.table = table
        self.history = History()
        self._coverage = coverage
        self._record: TransitionRecord | None = None
        self._taken: TransitionSpec | None = None
        self.check_ranks = distributed.checking_ranks()
        _Machine(
            model=self,
            states=_nested_states(table),
            transitions=[self._runtime_transition(spec) for spec in table.transitions],
            initial=table.initial,
            auto_transitions=False,
            send_event=True,
            model_attribute="machine_state",
        )

    @property
    def spec(self) -> StateSpec:
        return self.table.by_name[self.machine_state]

    def fire(self, trigger: str, cause: BaseException | None = None) -> TransitionRecord:
        """Fire `trigger`; guards choose the edge. A refused event raises FlowError naming state and guards.

        `cause` is the exception an `interrupt` answers: it goes into the record, so a dump says why.
        """
        trainer = self.trainer
        record = self.history.open(
            trigger,
            self.machine_state,
            epoch=trainer.current_epoch,
            global_step=trainer.global_step,
            batch_idx=trainer.fit_loop.batch_idx if trigger == "val_check" else None,
            rank=trainer.global_rank,
        )
        if cause is not None:
            record.exception = ExceptionRecord.from_exception(cause)
        self._record, self._taken = record, None
        try:
            taken = self._trigger(trigger)
        except BaseException as exc:
            record.exception = ExceptionRecord.from_exception(exc)
            raise
        finally:
            if self._taken is not None and self.machine_state == self._taken.dest:
                record.dest = self.machine_state
            self._record = None
        return record if taken else self._refuse(record, "every candidate's guard failed")

    def _trigger(self, trigger: str) -> bool:
        try:
            return self.trigger(trigger)
        except MachineError:
            return False

    def _refuse(self, record: TransitionRecord, reason: str) -> TransitionRecord:
        outcomes = ", ".join(f"{g.name}={g.value}" for g in record.guards) or "no transition declared"
        error = FlowError(
            f"internal error: event {record.trigger!r} refused in state {record.source!r} ({outcomes}; {reason})"
        )
        record.exception = ExceptionRecord.from_exception(error)
        raise error

    def _runtime_transition(self, spec: TransitionSpec) -> dict[str, Any]:
        callbacks = {
            "before": [_Taken(self, spec)] + [_Callback(self, name, spec.best_effort) for name in spec.before],
            "after": [_Callback(self, name, spec.best_effort) for name in spec.after],
        }
        conditions = [] if spec.guard_name is None else [_Guard(self, spec.guard_name, spec.guard_negated)]
        return {
            "trigger": spec.trigger,
            "source": spec.source,
            "dest": spec.dest,
            "conditions": conditions,
            **callbacks,
        }


class _Guard:
    def __init__(self, flow: Flow, name: str, negated: bool):
        self.flow, self.name, self.negated, self.predicate = flow, name, negated, GUARDS[name]
        self.__name__ = ("not " if negated else "") + name

    def __call__(self, _event: Any) -> bool:
        value = bool(self.predicate(self.flow.trainer))
        self.flow._record.guards.append(GuardRecord(name=self.name, value=value))
        self.flow._coverage.record_guard(self.name, value)
        return value != self.negated


class _Taken:
    """First `before` callback: runs once the guards passed, so it marks the edge as taken."""

    def __init__(self, flow: Flow, spec: TransitionSpec):
        self.flow, self.spec, self.__name__ = flow, spec, "taken"

    def __call__(self, _event: Any) -> None:
        self.flow._taken = self.spec
        self.flow._record.transition = self.spec.key
        self.flow._coverage.record_transition(self.spec.key)
        # A failure is one rank's own path; every other edge must be the same on all ranks.
        if self.flow.check_ranks and self.spec.trigger != "interrupt":
            distributed.check_same_edge(self.flow.trainer, self.spec.key)


class _Callback:
    def __init__(self, flow: Flow, name: str, best_effort: bool):
        self.flow, self.name, self.best_effort, self.action = flow, name, best_effort, ACTIONS[name]
        self.__name__ = name

    def __call__(self, _event: Any) -> None:
        start = time.perf_counter()
        error: Exception | None = None
        try:
            self.action(self.flow.trainer)
        except Exception as exc:
            error = exc
            if not self.best_effort:
                raise
            _log.warning("%s failed while interrupting; continuing the interrupt path", self.name, exc_info=exc)
        finally:
            self.flow._record.callbacks.append(
                CallbackRecord(
                    name=self.name,
                    duration_s=time.perf_counter() - start,
                    error=None if error is None else f"{type(error).__name__}: {error}",
                )
            )


def _nested_states(table: MachineTable) -> list[Any]:
    """Turn dotted leaf names into transitions' nested state dicts (one level of nesting is all we use)."""
    top: list[Any] = []
    parents: dict[str, dict[str, Any]] = {}
    for state in table.states:
        if state.parent is None:
            top.append(state.name)
            continue
        if state.parent not in parents:
            parents[state.parent] = {"name": state.parent, "children": [], "initial": state.leaf}
            top.append(parents[state.parent])
        parents[state.parent]["children"].append(state.leaf)
    return top
