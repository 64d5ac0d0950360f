"""The run's flow as a timeline: history records (and profilers' chrome traces) as Chrome trace-event JSON.

Perfetto (ui.perfetto.dev) and chrome://tracing open the file. Each rank is a process, "rank N", with a track of
the machine's states (a compound state encloses the states inside it), a track of the transition attempts (each
transition callback nested in order with its measured duration, guard outcomes and reasons, callback notes and
errors and the exception as the slices' args) and counter tracks of the epoch, the global step and the batch index.
Every rank is placed by wall-clock time, so the ranks of one run share one time axis and a slow rank stands out.

A profiler's chrome trace (torch.profiler's, or the timeline of this package's profilers) joins its rank's process:
its `baseTimeNanoseconds` (the wall-clock time its `ts` count from) puts it on the same axis, and its
`distributedInfo.rank` names the rank (a trace without one comes from a single-process run: rank 0).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from statemachine.engine.history import TransitionRecord, read_json_object, write_atomic

_NS_PER_S = 1_000_000_000
_STATES_TID = 1
_TRANSITIONS_TID = 2
_FIRST_PROFILE_TID = 10  # after the machine's own tracks, in order
_COUNTERS = ("epoch", "global_step", "batch_idx")


class TraceFileSource(Protocol):
    """A profiler that lists the chrome traces it wrote (every profiler of `statemachine.profilers`)."""

    def trace_files(self) -> list[str]: ...


class HistoryRecords(list[TransitionRecord]):
    """`trainer.history`: the transition records as a list, which can also be written as a timeline."""

    def to_trace(
        self,
        path: str | os.PathLike[str],
        *,
        profiler: TraceFileSource | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> str:
        """Write the records as a Chrome trace to `path` (any fsspec URL, `storage_options` for its filesystem),
        never leaving a half-written file; returns `path`.

        With `profiler` (e.g. `trainer.profiler`), the chrome traces it wrote join this rank's process.
        """
        path = os.fspath(path)
        if not self:
            raise ValueError("the history has no records to trace: no trainer call has run yet")
        trace = build_trace({"trainer.history": self}, profiler_traces(profiler))
        write_trace(path, trace, storage_options)
        return path


def profiler_traces(profiler: TraceFileSource | None) -> dict[str, dict[str, Any]]:
    """The chrome traces `profiler` wrote, read back and keyed by path; none without a profiler."""
    if profiler is None:
        return {}
    trace_files = getattr(profiler, "trace_files", None)
    if not callable(trace_files):
        raise TypeError(
            f"profiler={type(profiler).__name__} lists no chrome traces: pass one of statemachine.profilers' "
            "profilers (SimpleProfiler(timeline=True), AdvancedProfiler(timeline=True), PyTorchProfiler)"
        )
    return {path: load_profile(path) for path in trace_files()}


# ---- the trace ----------------------------------------------------------------------------------------------


def build_trace(
    histories: Mapping[str, Sequence[TransitionRecord]], profiles: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The Chrome trace of one run: `histories` holds one rank's records each, `profiles` chrome traces to merge.

    Both are keyed by a name (a file path) that errors name. `ts` counts microseconds from the earliest event.
    """
    profiles = profiles or {}
    ranks = _one_history_per_rank(histories)
    bases = {name: _profile_base(name, profile) for name, profile in profiles.items()}
    starts = [_wall_ns(records[0].wall_time) for records in ranks.values()]
    starts += [
        start for name, profile in profiles.items() if (start := _earliest(name, profile, bases[name])) is not None
    ]
    origin = min(starts)
    events: list[dict[str, Any]] = []
    for rank, records in sorted(ranks.items()):
        events += [*_process_metadata(rank), *_machine_tracks(rank), *_rank_events(rank, _layout(records, origin))]
    tids = _ProfileTracks()
    for name, profile in profiles.items():
        events += _profile_events(name, profile, bases[name] - origin, tids)
    for rank in sorted(tids.ranks - ranks.keys()):
        events += _process_metadata(rank)
    return {
        "traceEvents": sorted(events, key=_order),
        "displayTimeUnit": "ms",
        "otherData": {"wall_time_origin_ns": origin, "ranks": sorted(ranks.keys() | tids.ranks)},
    }


def write_trace(path: str | os.PathLike[str], trace: Mapping[str, Any], storage_options: dict | None = None) -> None:
    """Write `trace` as compact JSON to `path` (anything fsspec writes), through a temporary name."""
    write_atomic(os.fspath(path), json.dumps(trace, separators=(",", ":")).encode(), storage_options)


def _one_history_per_rank(histories: Mapping[str, Sequence[TransitionRecord]]) -> dict[int, Sequence[TransitionRecord]]:
    if not histories:
        raise ValueError("no history to trace: give at least one dump")
    owners: dict[int, str] = {}
    ranks: dict[int, Sequence[TransitionRecord]] = {}
    for name, records in histories.items():
        if not records:
            raise ValueError(f"history {name!r} has no records to trace")
        found = sorted({record.rank for record in records})
        if len(found) > 1:
            raise ValueError(f"history {name!r} mixes the records of ranks {found}; a dump holds one rank's records")
        rank = found[0]
        if rank in owners:
            raise ValueError(f"{owners[rank]!r} and {name!r} both hold rank {rank}'s records: give one dump per rank")
        owners[rank], ranks[rank] = name, records
    return ranks


def _order(event: dict[str, Any]) -> tuple[bool, float, float]:
    # Metadata first; then by time, a longer slice before a shorter one starting with it (its parent).
    return (event["ph"] != "M", event["ts"], -event.get("dur", 0.0))


def _wall_ns(seconds: float) -> int:
    return round(seconds * _NS_PER_S)


def _us(ns: int) -> float:
    """Whole nanoseconds as the format's microseconds (three decimals, exact enough to give the same integer back)."""
    return ns / 1000


def _metadata(kind: str, rank: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": rank, "tid": tid, "ts": 0, "args": args}


def _process_metadata(rank: int) -> list[dict[str, Any]]:
    return [
        _metadata("process_name", rank, 0, {"name": f"rank {rank}"}),
        _metadata("process_sort_index", rank, 0, {"sort_index": rank}),
    ]


def _machine_tracks(rank: int) -> list[dict[str, Any]]:
    return [*_thread_track(rank, _STATES_TID, "states"), *_thread_track(rank, _TRANSITIONS_TID, "transitions")]


def _thread_track(rank: int, tid: int, name: str) -> list[dict[str, Any]]:
    """A thread's name, and its place among the process's tracks (the machine's first, then the profiles')."""
    return [
        _metadata("thread_name", rank, tid, {"name": name}),
        _metadata("thread_sort_index", rank, tid, {"sort_index": tid}),
    ]


# ---- one rank's history ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Placed:
    """A record on the time axis: its start and its callbacks' durations, in nanoseconds after the origin."""

    record: TransitionRecord
    start: int
    durations: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + sum(self.durations)


def _layout(records: Sequence[TransitionRecord], origin: int) -> list[_Placed]:
    placed: list[_Placed] = []
    for record in records:
        start = _wall_ns(record.wall_time) - origin
        if placed:
            # The next record opens after the last callback returned; a record starting earlier is the wall clock
            # stepping back (or rounding), and its slices must still not overlap the previous record's.
            start = max(start, placed[-1].end)
        durations = tuple(round(callback.duration_s * _NS_PER_S) for callback in record.callbacks)
        placed.append(_Placed(record, start, durations))
    return placed


def _rank_events(rank: int, placed: list[_Placed]) -> list[dict[str, Any]]:
    return [*_state_slices(rank, placed), *_transition_slices(rank, placed), *_counters(rank, placed)]


def _slice(name: str, cat: str, pid: int, tid: int, start: int, end: int, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": _us(start),
        "dur": _us(end - start),
        "args": args,
    }


@dataclass(frozen=True)
class _Stay:
    state: str
    start: int
    end: int
    entered_by: TransitionRecord
    left_by: TransitionRecord | None


def _stays(placed: list[_Placed]) -> list[_Stay]:
    """Each time the machine was in a state: from the record that entered it to the record that left it.

    The state the first record starts in was entered before the history begins, so it has no stay; the last
    stay ends with the last record (the machine is still there when the history ends).
    """
    stays: list[_Stay] = []
    current: _Placed | None = None
    for entry in placed:
        if entry.record.dest is None:
            continue
        if current is not None:
            stays.append(_Stay(current.record.end_state, current.start, entry.start, current.record, entry.record))
        current = entry
    if current is not None:
        stays.append(_Stay(current.record.end_state, current.start, placed[-1].end, current.record, None))
    return stays


def _state_slices(rank: int, placed: list[_Placed]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    enclosing: list[tuple[str, int]] = []  # the compound states open now, outermost first, with their starts
    for stay in _stays(placed):
        parents = _parents(stay.state)
        kept = 0
        while kept < min(len(enclosing), len(parents)) and enclosing[kept][0] == parents[kept]:
            kept += 1
        while len(enclosing) > kept:
            name, start = enclosing.pop()
            events.append(_slice(name, "state", rank, _STATES_TID, start, stay.start, {"state": name}))
        enclosing += [(parent, stay.start) for parent in parents[kept:]]
        args: dict[str, Any] = {"state": stay.state, "entered_by": _describe(stay.entered_by)}
        args["left_by"] = None if stay.left_by is None else _describe(stay.left_by)
        events.append(_slice(stay.state, "state", rank, _STATES_TID, stay.start, stay.end, args))
    end = placed[-1].end
    for name, start in reversed(enclosing):
        events.append(_slice(name, "state", rank, _STATES_TID, start, end, {"state": name}))
    return events


def _parents(state: str) -> list[str]:
    """`fitting.training` -> [`fitting`]: the compound states around a state, outermost first."""
    parts = state.split(".")
    return [".".join(parts[:depth]) for depth in range(1, len(parts))]


def _describe(record: TransitionRecord) -> str:
    return f"seq {record.seq}: {record.trigger}"


def _transition_slices(rank: int, placed: list[_Placed]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for entry in placed:
        record = entry.record
        args = _record_args(record)
        events.append(_slice(_record_name(record), "transition", rank, _TRANSITIONS_TID, entry.start, entry.end, args))
        start = entry.start
        for callback, duration in zip(record.callbacks, entry.durations, strict=True):
            measured: dict[str, Any] = {"duration_s": callback.duration_s}
            if callback.note is not None:
                measured["note"] = callback.note
            if callback.error is not None:
                measured["error"] = callback.error
            events.append(_slice(callback.name, "callback", rank, _TRANSITIONS_TID, start, start + duration, measured))
            start += duration
        if record.exception is not None:
            exception = record.exception
            events.append(
                {
                    "ph": "i",
                    "s": "t",
                    "cat": "exception",
                    "name": f"{exception.type}: {exception.message}",
                    "pid": rank,
                    "tid": _TRANSITIONS_TID,
                    "ts": _us(entry.start),
                    "args": {"seq": record.seq, "trigger": record.trigger},
                }
            )
    return events


def _record_name(record: TransitionRecord) -> str:
    if record.refused:
        return f"{record.trigger} (refused)"
    if record.exception is not None and record.dest is None:
        return f"{record.trigger} (failed)"
    return record.trigger


def _record_args(record: TransitionRecord) -> dict[str, Any]:
    args: dict[str, Any] = {
        "seq": record.seq,
        "trigger": record.trigger,
        "source": record.source,
        "transition": record.transition,
        "dest": record.dest,
        "epoch": record.epoch,
        "global_step": record.global_step,
        "batch_idx": record.batch_idx,
    }
    if record.guards:
        args["guards"] = {guard.name: guard.value for guard in record.guards}
    reasons = {guard.name: guard.reason for guard in record.guards if guard.reason}
    if reasons:
        args["reasons"] = reasons
    if record.exception is not None:
        args["exception"] = record.exception.model_dump()
    return args


def _counters(rank: int, placed: list[_Placed]) -> list[dict[str, Any]]:
    """Each counter where it changes; the batch index only inside a batch loop (elsewhere it has none)."""
    events: list[dict[str, Any]] = []
    last: dict[str, int] = {}
    for entry in placed:
        for name in _COUNTERS:
            value = getattr(entry.record, name)
            if value is None or last.get(name) == value:
                continue
            last[name] = value
            events.append(
                {
                    "ph": "C",
                    "name": name,
                    "pid": rank,
                    "tid": _TRANSITIONS_TID,
                    "ts": _us(entry.start),
                    "args": {"value": value},
                }
            )
    return events


# ---- profilers' chrome traces ---------------------------------------------------------------------------------


def load_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a chrome trace (`.json`, or `.json.gz` as torch's TensorBoard handler writes); errors name the file."""
    path = os.fspath(path)
    data = read_json_object(path, "profile")
    if not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"profile {path!r} is not a chrome trace: it has no traceEvents list")
    return data


def _profile_base(name: str, profile: Mapping[str, Any]) -> int:
    """The wall-clock nanoseconds a profile's `ts` count from."""
    base = profile.get("baseTimeNanoseconds")
    if not isinstance(base, int) or isinstance(base, bool):
        raise ValueError(
            f"profile {name!r} has no baseTimeNanoseconds, so its times cannot be placed on the wall clock; "
            "torch.profiler's chrome traces and the timelines of statemachine's profilers have it"
        )
    return base


def _profile_rank(name: str, profile: Mapping[str, Any]) -> int:
    info = profile.get("distributedInfo", {})
    rank = info.get("rank", 0) if isinstance(info, dict) else None
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise ValueError(f"profile {name!r} has distributedInfo {info!r}; its rank must be an int >= 0")
    return rank


def _timed(name: str, profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The profile's events that sit on the time axis (all but metadata), each checked to have a time."""
    events = []
    for index, event in enumerate(profile["traceEvents"]):
        if not isinstance(event, dict):
            raise ValueError(f"profile {name!r}: event {index} is a {type(event).__name__}, not an object")
        if event.get("ph") == "M":
            continue
        if "ts" not in event:
            raise ValueError(f"profile {name!r}: event {index} ({event.get('name')!r}) has no ts")
        for key in ("ts", "dur"):
            value = event.get(key, 0)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"profile {name!r}: event {index} ({event.get('name')!r}) has {key} {value!r}")
        events.append(event)
    return events


def _earliest(name: str, profile: Mapping[str, Any], base: int) -> int | None:
    times = [_profile_ns(event["ts"]) for event in _timed(name, profile)]
    return base + min(times) if times else None


def _profile_ns(microseconds: float) -> int:
    return round(microseconds * 1000)


class _ProfileTracks:
    """The ids the merged profiles' events get: a track of its rank for each (profile, process, thread), and a
    flow or async id of the merged trace for each (profile, id), since every profile counts its ids from its own
    start and two profiles' ids would join unrelated events."""

    def __init__(self) -> None:
        self._next_tid: dict[int, int] = {}
        self._ids: dict[tuple[str, str], int] = {}
        self.ranks: set[int] = set()

    def new_tid(self, rank: int) -> int:
        self.ranks.add(rank)
        tid = self._next_tid.get(rank, _FIRST_PROFILE_TID)
        self._next_tid[rank] = tid + 1
        return tid

    def event_id(self, profile: str, original: Any) -> int:
        return self._ids.setdefault((profile, json.dumps(original)), len(self._ids) + 1)


def _profile_events(name: str, profile: Mapping[str, Any], shift: int, tracks: _ProfileTracks) -> list[dict[str, Any]]:
    """The profile's events on its rank's process, each of its threads one track named after the file."""
    rank = _profile_rank(name, profile)
    label = os.path.basename(name.rstrip("/"))
    names = {
        (event.get("pid"), event.get("tid")): str(event.get("args", {}).get("name"))
        for event in profile["traceEvents"]
        if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == "thread_name"
    }
    tids: dict[tuple[Any, Any], int] = {}
    events: list[dict[str, Any]] = []
    for event in _timed(name, profile):
        key = (event.get("pid"), event.get("tid"))
        if key not in tids:
            tid = tids[key] = tracks.new_tid(rank)
            thread = names.get(key) or " ".join(str(part) for part in key if part not in ("", None)) or "events"
            events += _thread_track(rank, tid, f"{label}: {thread}")
        moved = dict(event, pid=rank, tid=tids[key])
        start = _profile_ns(event["ts"]) + shift
        moved["ts"] = _us(start)
        if "dur" in event:
            moved["dur"] = _us(_profile_ns(event["ts"] + event["dur"]) + shift - start)
        if "id" in event:
            moved["id"] = tracks.event_id(name, event["id"])
        if event.get("s") == "g":
            moved["s"] = "p"  # the profile's whole world is its rank: its global markers mark that process only
        events.append(moved)
    return events
