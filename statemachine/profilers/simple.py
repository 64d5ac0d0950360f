"""SimpleProfiler: wall time per action (count, mean, total), plus the machine's transitions and callbacks."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from statemachine.profilers.base import Profiler
from statemachine.profilers.timeline import ActionTimeline, why_no_timeline

if TYPE_CHECKING:
    from statemachine.engine.history import TransitionRecord


class SimpleProfiler(Profiler):
    """Times every action with `time.perf_counter`; the report lists them by total time, longest first.

    With `extended=True` the report also has the number of calls and each action's share of the run's wall time.
    With `timeline=True` every action's start and end are kept too, and each run, when it ends (normally or not),
    writes them as a chrome trace `{stage}-{filename}[-{local_rank}].{n}.trace.json` next to the report.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        extended: bool = True,
        timeline: bool = False,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.extended = extended
        self._timeline = ActionTimeline() if timeline else None
        self.current_actions: dict[str, float] = {}
        self.recorded_durations: defaultdict[str, list[float]] = defaultdict(list)
        self.start_time = time.perf_counter()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        self.recorded_durations.clear()
        self.start_time = time.perf_counter()
        if self._timeline is not None:
            self._timeline.start_run()

    def start(self, action_name: str) -> None:
        if action_name in self.current_actions:
            raise ValueError(f"action {action_name!r} was started and is still running")
        self.current_actions[action_name] = time.perf_counter()

    def stop(self, action_name: str) -> None:
        end = time.perf_counter()
        started = self.current_actions.pop(action_name, None)
        if started is None:
            raise ValueError(f"action {action_name!r} was stopped but never started")
        self.recorded_durations[action_name].append(end - started)
        if self._timeline is not None:
            self._timeline.add(action_name, started, end)

    def add_machine_timings(self, records: Sequence[TransitionRecord]) -> None:
        """Each transition and each transition callback of the run, from the history's own timings.

        The machine already times its callbacks, so reading them here adds nothing to the run itself. The
        transition that ends the run is still in progress: it counts the callbacks that ran before the report.
        """
        for record in records:
            if record.transition is None:
                continue
            self.recorded_durations[f"[Transition]{record.transition}"].append(
                sum(callback.duration_s for callback in record.callbacks)
            )
            for callback in record.callbacks:
                self.recorded_durations[f"[Machine]{callback.name}"].append(callback.duration_s)

    def summary(self) -> str:
        if not self.recorded_durations:
            return ""
        rows = sorted(
            ((name, len(values), sum(values)) for name, values in self.recorded_durations.items()),
            key=lambda row: row[2],
            reverse=True,
        )
        if self.extended:
            total = time.perf_counter() - self.start_time
            header = ["Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %"]
            body = [
                [name, f"{seconds / calls:.5g}", str(calls), f"{seconds:.5g}", f"{100 * seconds / total:.3g}"]
                for name, calls, seconds in rows
            ]
            calls_total = sum(calls for _, calls, _ in rows)
            first = ["Total", "-", str(calls_total), f"{total:.5g}", "100 %"]
        else:
            header = ["Action", "Mean duration (s)", "Total time (s)"]
            body = [[name, f"{seconds / calls:.5g}", f"{seconds:.5g}"] for name, calls, seconds in rows]
            first = None
        return f"{self._title()}\n\n{_table(header, body, first)}"

    def teardown(self, stage: str | None) -> None:
        if self._timeline is not None and self._stage is not None:
            self._write_trace(self._timeline.to_json(type(self).__name__), ".trace.json")
            self._timeline.spans = []
        super().teardown(stage)
        self.current_actions.clear()

    def _why_no_trace_files(self) -> str:
        return why_no_timeline(type(self).__name__, self._timeline)


def _table(header: list[str], body: list[list[str]], first: list[str] | None) -> str:
    everything = [header, *([first] if first else []), *body]
    widths = [max(len(row[i]) for row in everything) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "|  " + "  |  ".join(cell.ljust(width) for cell, width in zip(cells, widths)) + "  |"

    rule = "-" * len(line(header))
    lines = [rule, line(header), rule]
    if first:
        lines += [line(first), rule]
    lines += [line(row) for row in body]
    lines.append(rule)
    return "\n".join(lines)
