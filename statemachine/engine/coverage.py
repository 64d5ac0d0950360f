"""Transition coverage: which declared transitions fired, and how each guard decided, across a whole process.

Every machine records into the process-wide `COVERAGE` and registers the table it runs, so a user's extended
table is reported too. The pytest plugin (`statemachine.pytest_plugin`) prints `COVERAGE.report()` at the end
of a session and can fail it under a threshold. Counts from other processes (spawned DDP workers, subprocess
tests) travel as `export()` dicts and are added back with `merge_counts`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from statemachine.engine.table import TABLE, MachineTable


class TransitionCoverage:
    def __init__(self) -> None:
        self._transitions: Counter[str] = Counter()
        # Per guard, [times False, times True]: a machine holds its guards' lists and counts with `tally[value]`.
        self._guards: dict[str, list[int]] = {}
        self._tables: dict[str, MachineTable] = {TABLE.digest: TABLE}

    def register(self, table: MachineTable) -> None:
        self._tables.setdefault(table.digest, table)

    @property
    def tables(self) -> list[MachineTable]:
        """The built-in table, then every other table a machine ran in this process."""
        return list(self._tables.values())

    def record_transition(self, key: str) -> None:
        self._transitions[key] += 1

    def guard_tally(self, name: str) -> list[int]:
        """The guard's [times False, times True], for a machine to count into (indexed by the outcome)."""
        return self._guards.setdefault(name, [0, 0])

    def reset(self) -> None:
        self._transitions.clear()
        for tally in self._guards.values():  # zeroed in place: machines keep counting into these lists
            tally[:] = [0, 0]

    def hits(self, key: str) -> int:
        return self._transitions[key]

    def guard_counts(self, name: str) -> tuple[int, int]:
        """(times true, times false)."""
        false, true = self._guards.get(name, (0, 0))
        return true, false

    def percent(self, table: MachineTable = TABLE) -> float:
        """Fired declared transitions as a percentage of the declared ones."""
        declared = [t.key for t in table.transitions]
        if not declared:
            return 100.0
        fired = sum(1 for key in declared if self._transitions[key])
        return fired / len(declared) * 100

    def branch_percent(self, table: MachineTable = TABLE) -> float:
        """Guard outcomes seen (True and False for each guard) as a percentage of all of them."""
        counts = [count for guard in table.guards for count in self.guard_counts(guard.name)]
        return 100.0 if not counts else sum(1 for count in counts if count) / len(counts) * 100

    def report(self, table: MachineTable = TABLE) -> str:
        declared = [t.key for t in table.transitions]
        width = max((len(key) for key in declared), default=0)
        lines = [f"table {table.name!r} ({table.digest})", "transitions (hits):"]
        for key in declared:
            hits = self._transitions[key]
            lines.append(f"  {key.ljust(width)}  {hits:>6}" + ("  <- never fired" if hits == 0 else ""))
        lines.append("guards (true/false):")
        guard_width = max((len(guard.name) for guard in table.guards), default=0)
        for guard in table.guards:
            true, false = self.guard_counts(guard.name)
            missing = [label for label, count in (("True", true), ("False", false)) if count == 0]
            note = f"  <- never {' nor '.join(missing)}" if missing else ""
            lines.append(f"  {guard.name.ljust(guard_width)}  T {true:>6}  F {false:>6}{note}")
        fired = sum(1 for key in declared if self._transitions[key])
        lines.append(f"transition coverage: {fired}/{len(declared)} ({self.percent(table):.1f}%)")
        lines.append(f"guard branch coverage: {self.branch_percent(table):.1f}%")
        return "\n".join(lines)

    def export(self) -> dict:
        """The counts as plain JSON data, the shape `merge_counts(**exported)` takes back."""
        guards = {name: list(self.guard_counts(name)) for name, tally in self._guards.items() if any(tally)}
        return {"transitions": dict(self._transitions), "guards": guards}

    def merge_counts(self, transitions: Mapping[str, int], guards: Mapping[str, Sequence[int]]) -> None:
        """Add counts recorded elsewhere (another process's `export()`)."""
        for key, hits in transitions.items():
            self._transitions[key] += _count(hits, f"transition {key!r}")
        for name, pair in guards.items():
            if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise ValueError(f"guard {name!r} counts must be a (true, false) pair, got {pair!r}")
            tally = self.guard_tally(name)
            tally[True] += _count(pair[0], f"guard {name!r} true")
            tally[False] += _count(pair[1], f"guard {name!r} false")


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} count must be a non-negative int, got {value!r}")
    return value


COVERAGE = TransitionCoverage()
"""The process-wide collector every machine records into."""
