"""The runtime machine: a table turned into a plain `transitions` hierarchical machine.

Its model is a small `Flow` object, not the Trainer, so the Trainer's namespace stays free of generated trigger and
helper methods. The `transitions` machine is built once per table (and thread: an event's scope lives on the
machine) and serves every flow on that table: a flow fires through `trigger_event` with itself as the model and
is never registered, so the machine holds no flow, and guards and callbacks find theirs as the event's model.
Bookkeeping uses `transitions`' own machinery: the history record of an event travels in its `EventData` (as a
trigger keyword), `before_state_change` marks the edge taken, and `finalize_event`, which runs after every event
(also failed ones), closes the record.

Per batch, no trigger runs: the poll `Flow.poller` builds for a state evaluates the table's candidates for an event
there (guards counted for coverage, True and False) and fires only when one passes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, NamedTuple, Protocol

from transitions.core import MachineError
from transitions.extensions.nesting import HierarchicalMachine, NestedState, NestedTransition

from statemachine.engine.binding import bind
from statemachine.engine.coverage import COVERAGE, TransitionCoverage
from statemachine.engine.history import CallbackRecord, ExceptionRecord, GuardRecord, History, TransitionRecord
from statemachine.engine.table import SEPARATOR, TABLE, MachineTable, StateSpec, TransitionSpec

_log = logging.getLogger(__name__)
_MACHINE_NAME = "statemachine"


class _QuietForOurMachines(logging.Filter):
    """`transitions` logs every step of every event at INFO; for this project's machines that costs several
    times the transition itself and says nothing the history does not. Other machines keep their logging."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (isinstance(args, tuple) and args and args[0] == f"{_MACHINE_NAME}: ")


for _name in ("transitions.core", "transitions.extensions.nesting"):
    logging.getLogger(_name).addFilter(_QuietForOurMachines())


class Position(NamedTuple):
    """Where a run is when an event fires, as its history record keeps it."""

    epoch: int
    global_step: int
    batch_idx: int | None  # None outside an epoch's batches
    rank: int


class FlowContext(Protocol):
    """What the machine needs of the run it drives. Guards, transition callbacks and stage handlers receive it."""

    @property
    def multi_process(self) -> bool: ...

    def position(self) -> Position: ...

    def agree(self, value: bool, all_ranks: bool) -> bool:
        """`value` reduced across ranks: True when every rank's is (`all_ranks`) or when any rank's is."""
        ...

    def edge_taken(self, key: str) -> None:
        """Called for each edge the machine takes, before its callbacks (a debug check that ranks agree)."""
        ...


class FlowError(RuntimeError):
    """An event the table does not allow in the current state: a bug in the trainer, never a user error."""


class _DotState(NestedState):
    separator = SEPARATOR


class _SpecTransition(NestedTransition):
    """A runtime edge that knows the table row it came from."""

    def __init__(self, *args: Any, spec: TransitionSpec, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = spec


class _Machine(HierarchicalMachine):
    state_cls = _DotState
    transition_cls = _SpecTransition


class _Machines(threading.local):
    """The `transitions` machine of each table (by digest), one set per thread."""

    def __init__(self) -> None:
        self.by_digest: dict[str, _Machine] = {}


_MACHINES = _Machines()


def _machine_for(table: MachineTable) -> _Machine:
    machine = _MACHINES.by_digest.get(table.digest)
    if machine is None:
        callbacks = bind(table).callbacks
        machine = _MACHINES.by_digest[table.digest] = _Machine(
            model=None,
            states=_nested_states(table),
            transitions=[_runtime_transition(spec, callbacks) for spec in table.transitions],
            initial=table.initial,
            auto_transitions=False,
            send_event=True,
            model_attribute="machine_state",
            name=_MACHINE_NAME,
            # Resolved by name on the event's model, the flow that fired.
            before_state_change=["_mark_taken"],
            finalize_event=["_close_record"],
        )
    return machine


class Flow:
    """Holds the machine's state for one trainer and fires events on it, for the run `context` set on it."""

    # The current state's name, which the `transitions` machine reads and sets.
    machine_state: str
    # The run in flight: what guards, callbacks and handlers receive. Set for each call, before its first event.
    context: FlowContext

    def __init__(
        self,
        table: MachineTable = TABLE,
        coverage: TransitionCoverage = COVERAGE,
        state: str | None = None,
    ):
        """`state`: where the machine starts (the table's initial state by default)."""
        self.table = table
        self.history = History()
        self._coverage = coverage
        coverage.register(table)
        binding = bind(table)
        self._handlers = binding.handlers
        # Per guard: (predicate, None or whether all ranks must agree, its coverage tally [False, True]).
        self._guards = {
            spec.name: (
                binding.guards[spec.name],
                spec.collective == "all" if spec.collective else None,
                coverage.guard_tally(spec.name),
            )
            for spec in table.guards
        }
        self._requires = {spec.name: spec.requires for spec in table.guards if spec.requires is not None}
        # Per (trigger, state): each candidate's (guard name or None, negated), for the per-batch poll.
        self._polls: dict[tuple[str, str], list[tuple[str | None, bool]]] = {}
        for spec in table.transitions:
            self._polls.setdefault((spec.trigger, spec.source), []).append((spec.guard_name, spec.guard_negated))
        self._pollers: dict[tuple[str, str], Callable[[], bool]] = {}
        self._multi_process = False  # read at each fire; a run's world size does not change between fires
        self._deferred: list[Callable[[], None]] = []
        # A KeyboardInterrupt or SystemExit that a best-effort step swallowed so the edge could finish; the driver
        # raises it once the edge is done.
        self.exit_request: BaseException | None = None
        self.machine_state = table.initial if state is None else state

    @property
    def spec(self) -> StateSpec:
        return self.table.by_name[self.machine_state]

    def with_table(self, table: MachineTable) -> Flow:
        """This flow on another table (usually one extending this one), between runs: the new flow rests in the
        same state and appends to the same history."""
        if table is self.table:
            return self
        if not self.spec.resting:
            raise FlowError(f"internal error: the table cannot change while the machine runs ({self.machine_state!r})")
        if self.machine_state not in table.by_name:
            raise ValueError(f"table {table.name!r} has no state {self.machine_state!r}, where the machine rests")
        flow = Flow(table, self._coverage, state=self.machine_state)
        flow.history = self.history
        return flow

    def run_handler(self) -> str | None:
        """Run the current state's stage handler; it returns the event to fire (None: a poll already fired)."""
        handler = self.spec.handler
        assert handler is not None, "the driver runs handlers of running states only; every one has a handler"
        return self._handlers[handler](self.context)

    # ---- deciding ---------------------------------------------------------------------------------------

    def evaluate(self, name: str) -> tuple[bool, str | None]:
        """One guard's outcome (reduced across ranks when the table marks it collective), counted for coverage.

        A guard may return a string: it passes when non-empty, and the string is the reason recorded.
        """
        predicate, all_ranks, tally = self._guards[name]
        result = predicate(self.context)
        value = bool(result)
        if all_ranks is not None and self._multi_process:
            value = self.context.agree(value, all_ranks)
        tally[value] += 1
        return value, _reason(result)

    def poller(self, trigger: str) -> Callable[[], bool]:
        """The poll of `trigger` in the current state, a function built once per (trigger, state): each call
        evaluates the table's candidates for `trigger` there and fires the first that passes (cheap when none
        does). A loop that polls every batch from one state asks for it before its batches."""
        key = (trigger, self.machine_state)
        poller = self._pollers.get(key)
        if poller is None:
            poller = self._pollers[key] = self._build_poller(trigger, self._polls.get(key, []))
        return poller

    def may_pass(self, trigger: str) -> bool:
        """Whether a poll of `trigger` in the current state could fire: False when every candidate's guard requires
        a guard that fails now (`GuardSpec.requires`). A loop asks it once for the stretch in which those required
        guards cannot change (an epoch), and polls nothing while it is False."""
        decided: dict[str, bool] = {}
        for name, negated in self._polls.get((trigger, self.machine_state), []):
            required = None if name is None or negated else self._requires.get(name)
            if required is None:
                return True
            if required not in decided:
                decided[required] = self.evaluate(required)[0]
            if decided[required]:
                return True
        return False

    def _build_poller(self, trigger: str, candidates: list[tuple[str | None, bool]]) -> Callable[[], bool]:
        names = [name for name, negated in candidates if name is not None and not negated]
        plain = len(names) == len(candidates) == len(set(names)) and all(self._guards[n][1] is None for n in names)
        if not plain:
            return partial(self._poll_candidates, trigger, candidates)
        # Distinct, positive guards that no rank must agree on (the per-batch `val_check`): asked in order with
        # `evaluate`'s steps written out, so a poll that finds none passing costs one call per guard.
        guards = [(name, self._guards[name][0], self._guards[name][2]) for name in names]

        def poll_guards() -> bool:
            context = self.context
            for name, predicate, tally in guards:
                result = predicate(context)
                if result:
                    tally[True] += 1
                    self._fire_polled(trigger, names, name, result)
                    return True
                tally[False] += 1
            return False

        return poll_guards

    def _fire_polled(self, trigger: str, names: list[str], passed: str, result: Any) -> None:
        """Fire `trigger` for a poll in which guard `passed` passed, returning `result`: those before it failed."""
        decided: dict[str, tuple[bool, str | None]] = {name: (False, None) for name in names[: names.index(passed)]}
        decided[passed] = (True, _reason(result))
        self.fire(trigger, decided=decided)

    def _poll_candidates(self, trigger: str, candidates: list[tuple[str | None, bool]]) -> bool:
        decided: dict[str, tuple[bool, str | None]] = {}
        for name, negated in candidates:
            if name is not None and name not in decided:
                decided[name] = self.evaluate(name)
            if name is None or decided[name][0] != negated:
                self.fire(trigger, decided=decided)
                return True
        return False

    def fire(
        self,
        trigger: str,
        cause: BaseException | None = None,
        decided: dict[str, tuple[bool, str | None]] | None = None,
    ) -> TransitionRecord:
        """Fire `trigger`; guards choose the edge. A refused event raises FlowError naming state and guards.

        `cause` is the exception an `interrupt` answers: it goes into the record, so a dump says why.
        `decided` holds guard outcomes a poll already evaluated, so no guard runs twice for one decision.
        """
        context = self.context
        self._multi_process = context.multi_process
        epoch, global_step, batch_idx, rank = context.position()
        record = self.history.open(
            trigger, self.machine_state, epoch=epoch, global_step=global_step, batch_idx=batch_idx, rank=rank
        )
        if cause is not None:
            record.exception = ExceptionRecord.from_exception(cause)
        decided = {} if decided is None else decided
        record.guards.extend(GuardRecord(name=n, value=v, reason=r) for n, (v, r) in decided.items())
        try:
            taken = _machine_for(self.table).trigger_event(self, trigger, record=record, decided=decided, cause=cause)
        except MachineError:
            taken = False
        finally:
            self._run_deferred()
        if not taken:
            self._refuse(record)
        return record

    def defer(self, action: Callable[[], None]) -> None:
        """Run `action` once the current event's record is closed (e.g. a dump that must show the whole edge)."""
        self._deferred.append(action)

    def _run_deferred(self) -> None:
        actions, self._deferred = self._deferred, []
        for action in actions:
            action()

    def abandon(self, cause: BaseException) -> None:
        """Last resort when the interrupt edge itself could not run: rest in `interrupted`, and say so in the
        history, so the trainer accepts its next call."""
        record = self.history.open(
            "interrupt", self.machine_state, epoch=0, global_step=0, batch_idx=None, rank=self.context.position().rank
        )
        record.exception = ExceptionRecord.from_exception(cause)
        self.machine_state = record.dest = "interrupted"

    def _refuse(self, record: TransitionRecord) -> None:
        outcomes = ", ".join(f"{g.name}={g.value}" for g in record.guards) or "no transition declared"
        error = FlowError(
            f"internal error: event {record.trigger!r} refused in state {record.source!r} ({outcomes}; "
            "no candidate's guard passed)"
        )
        record.exception = ExceptionRecord.from_exception(error)
        raise error

    # ---- transitions' machine-level callbacks -----------------------------------------------------------

    def _mark_taken(self, event: Any) -> None:
        """Guards passed for `event.transition`: this is the edge taken."""
        spec = event.transition.spec
        event.kwargs["record"].transition = spec.key
        self._coverage.record_transition(spec.key)
        # A failure is one rank's own path; every other edge must be the same on all ranks.
        if spec.trigger != "interrupt":
            self.context.edge_taken(spec.key)

    def _close_record(self, event: Any) -> None:
        record: TransitionRecord = event.kwargs["record"]
        if record.transition is not None and self.machine_state == event.transition.spec.dest:
            record.dest = self.machine_state
        error = event.error
        if error is not None and not isinstance(error, MachineError) and error is not event.kwargs["cause"]:
            record.exception = ExceptionRecord.from_exception(error)


def _runtime_transition(spec: TransitionSpec, callbacks: dict[str, Callable[..., Any]]) -> dict[str, Any]:
    conditions = [] if spec.guard_name is None else [_Guard(spec.guard_name, spec.guard_negated)]
    return {
        "trigger": spec.trigger,
        "source": spec.source,
        "dest": spec.dest,
        "conditions": conditions,
        "before": [_Callback(name, callbacks[name], spec.best_effort) for name in spec.before],
        "after": [_Callback(name, callbacks[name], spec.best_effort) for name in spec.after],
        "spec": spec,
    }


class _Guard:
    """A table guard inside `transitions`: evaluated once per event, however many candidates read it."""

    def __init__(self, name: str, negated: bool):
        self.name, self.negated = name, negated
        self.__name__ = ("not " if negated else "") + name

    def __call__(self, event: Any) -> bool:
        decided = event.kwargs["decided"]
        if self.name not in decided:
            decided[self.name] = value, reason = event.model.evaluate(self.name)
            event.kwargs["record"].guards.append(GuardRecord(name=self.name, value=value, reason=reason))
        return decided[self.name][0] != self.negated


class _Callback:
    """A table callback inside `transitions`: timed into the event's record, with its note and error."""

    def __init__(self, name: str, action: Callable[[Any], Any], best_effort: bool):
        self.name, self.action, self.best_effort = name, action, best_effort
        self.__name__ = name

    def __call__(self, event: Any) -> None:
        flow: Flow = event.model
        start = time.perf_counter()
        error: BaseException | None = None
        note = None
        try:
            result = self.action(flow.context)
            note = result if isinstance(result, str) else None
        except BaseException as exc:
            error = exc
            if not self.best_effort:
                raise
            note_on_cause(
                event.kwargs["cause"],
                exc,
                f"{self.name} failed while interrupting; continuing the interrupt path",
                f"while the run was interrupted, {self.name} also failed: {type(exc).__name__}: {exc}",
            )
            if not isinstance(exc, Exception) and flow.exit_request is None:
                flow.exit_request = exc
        finally:
            event.kwargs["record"].callbacks.append(
                CallbackRecord(
                    name=self.name,
                    duration_s=time.perf_counter() - start,
                    error=None if error is None else f"{type(error).__name__}: {error}",
                    note=note,
                )
            )


def note_on_cause(cause: BaseException | None, error: BaseException, warning: str, note: str) -> None:
    """A failure while the run is interrupted never replaces the error being handled: it is logged (`warning`)
    and added to that error as `note`, once."""
    _log.warning(warning, exc_info=error)
    if cause is not None and note not in getattr(cause, "__notes__", ()):
        cause.add_note(note)


def table_for(table: MachineTable, owners: Iterable[object]) -> MachineTable:
    """`table`, extended by every owner (a callback, say) that needs states of its own: such an owner has
    `extend_table(table) -> MachineTable`, which returns the table unchanged when it already has them."""
    for owner in owners:
        extend = getattr(owner, "extend_table", None)
        if extend is not None:
            table = extend(table)
    return table


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


def _reason(result: Any) -> str | None:
    """A guard that returns a string gives the reason recorded with its outcome."""
    return result if isinstance(result, str) else None
