"""AdvancedProfiler: one cProfile per action, reported as each action's function-level statistics."""

from __future__ import annotations

import cProfile
import io
import marshal
import os
import pstats
import re
import time

from statemachine.engine.history import write_atomic
from statemachine.profilers.base import Profiler
from statemachine.profilers.timeline import ActionTimeline, why_no_timeline


class AdvancedProfiler(Profiler):
    """Each action gets its own `cProfile.Profile`; statistics are sorted by cumulative time.

    Only one cProfile can record at a time, so when an action starts inside another (a `training_step` inside
    `optimizer_step`) the outer one pauses until the inner one stops: each action's report holds the calls made
    in it and not in an action nested inside it.

    `line_count_restriction` limits each action's table (an int: that many rows; a float: that fraction).
    `dump_stats=True` also writes each action's raw statistics as `{stage}-{filename}-{action}.prof` (readable
    with `pstats` or snakeviz) next to the report. `timeline=True` also keeps every action's start and end, and
    each run, when it ends (normally or not), writes them as a chrome trace, as `SimpleProfiler(timeline=True)`
    does (the spans include cProfile's own cost of pausing and resuming).
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        line_count_restriction: float = 1.0,
        dump_stats: bool = False,
        timeline: bool = False,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats
        self._timeline = ActionTimeline() if timeline else None
        self.profiled_actions: dict[str, cProfile.Profile] = {}
        self._running: list[tuple[str, cProfile.Profile, float]] = []

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        self.profiled_actions.clear()
        if self._timeline is not None:
            self._timeline.start_run()

    def start(self, action_name: str) -> None:
        if self._running:
            self._running[-1][1].disable()
        profiler = self.profiled_actions.get(action_name)
        if profiler is None:
            profiler = self.profiled_actions[action_name] = cProfile.Profile()
        self._running.append((action_name, profiler, time.perf_counter() if self._timeline is not None else 0.0))
        profiler.enable()

    def stop(self, action_name: str) -> None:
        if not self._running or self._running[-1][0] != action_name:
            running = self._running[-1][0] if self._running else None
            raise ValueError(f"action {action_name!r} was stopped, but the running action is {running!r}")
        _, profiler, started = self._running.pop()
        profiler.disable()
        if self._timeline is not None:
            self._timeline.add(action_name, started, time.perf_counter())
        if self._running:
            self._running[-1][1].enable()

    def summary(self) -> str:
        reports = []
        for action_name, profiler in self.profiled_actions.items():
            stream = io.StringIO()
            stats = pstats.Stats(profiler, stream=stream)
            if self.dump_stats and self._stage is not None:  # a run in progress: not a re-read of its report
                name = self._prepare_filename(action_name=_safe(action_name), extension=".prof")
                write_atomic(self._output_path(name), marshal.dumps(stats.stats))  # type: ignore[attr-defined]  # typeshed omits Stats.stats; dump_stats writes it
            stats.strip_dirs().sort_stats("cumulative").print_stats(self.line_count_restriction)
            reports.append(f"Profile stats for: {action_name}\n{stream.getvalue()}")
        return f"{self._title()}\n\n" + "\n".join(reports) if reports else ""

    def teardown(self, stage: str | None) -> None:
        for _, profiler, _ in reversed(self._running):
            profiler.disable()
        self._running.clear()
        if self._timeline is not None and self._stage is not None:
            self._write_trace(self._timeline.to_json(type(self).__name__), ".trace.json")
            self._timeline.spans = []
        super().teardown(stage)

    def _why_no_trace_files(self) -> str:
        return why_no_timeline(type(self).__name__, self._timeline)


def _safe(action_name: str) -> str:
    """Action names hold brackets, spaces and arrows; file names keep letters, digits, `.`, `_` and `-`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", action_name).strip("_")
