"""A profiler's timeline: when each action of a run started and ended, written as a chrome trace.

The trace carries its wall-clock base (`baseTimeNanoseconds`) and its rank (`distributedInfo`), as torch.profiler's
do, so `trainer.history.to_trace(path, profiler=...)` and `python -m statemachine.history trace --profile` put its
actions on the run's time axis next to the machine's states and transitions.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

_NS_PER_S = 1_000_000_000


class ActionTimeline:
    """The spans of one run's actions on `time.perf_counter`, the clock the profilers time with.

    One clock for every span keeps nested actions exactly nested; one reading of both clocks when the run starts
    places them on the wall clock.
    """

    def __init__(self) -> None:
        self.start_run()

    def start_run(self) -> None:
        """Forget the last run's spans; this run's are placed from now."""
        self.spans: list[tuple[str, float, float]] = []
        self._perf_start, self._wall_start_ns = time.perf_counter(), time.time_ns()

    def add(self, action: str, start: float, end: float) -> None:
        """`action` ran from `start` to `end` (`time.perf_counter` readings)."""
        self.spans.append((action, start, end))

    def to_chrome(self, thread_name: str) -> dict[str, Any]:
        """The spans as a chrome trace: complete events of this process's main thread, `ts` after the base."""
        pid, tid = os.getpid(), threading.get_native_id()
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": thread_name}}
        ]
        for action, start, end in self.spans:
            begin, finish = self._ns(start), self._ns(end)
            events.append(
                {
                    "ph": "X",
                    "cat": "profiler",
                    "name": action,
                    "pid": pid,
                    "tid": tid,
                    "ts": begin / 1000,
                    "dur": (finish - begin) / 1000,
                }
            )
        return {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": self._wall_start_ns,
            "distributedInfo": {"rank": _global_rank()},
        }

    def to_json(self, thread_name: str) -> bytes:
        return json.dumps(self.to_chrome(thread_name), separators=(",", ":")).encode()

    def _ns(self, perf: float) -> int:
        """Nanoseconds after the run's start: whole, so a span and the one around it keep their order exactly."""
        return round((perf - self._perf_start) * _NS_PER_S)


def _global_rank() -> int:
    """This process's rank in the run, as torch.profiler records it (0 outside a process group)."""
    import torch.distributed as dist  # torch is loaded by the trainer already; the profilers' modules stay light

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def why_no_timeline(profiler: str, timeline: ActionTimeline | None) -> str:
    """Why a profiler with an optional timeline has written no chrome trace."""
    if timeline is None:
        return f"{profiler} records no timeline of its actions; make it with {profiler}(timeline=True)"
    return f"{profiler}(timeline=True) has written no timeline yet: it writes one when a run ends"
