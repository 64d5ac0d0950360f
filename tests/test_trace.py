"""The run as a timeline: `trainer.history.to_trace(path)` and `python -m statemachine.history trace` write Chrome
trace-event JSON (Perfetto, chrome://tracing) with a process per rank, the machine's states and transitions, the
counters, and the profilers' events on the same wall-clock axis."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import fsspec
import pytest
from conftest import REPO, Boom, TinyModel, make_loader, quiet_trainer
from ddp_app import RankModel, loader

import statemachine as L
from statemachine.engine.history import CallbackRecord, History, TransitionRecord
from statemachine.engine.trace import HistoryRecords, build_trace
from statemachine.history import main
from statemachine.profilers import AdvancedProfiler, PassThroughProfiler, PyTorchProfiler, SimpleProfiler

Event = dict[str, Any]


# ---- reading a trace ----------------------------------------------------------------------------------------


def read_trace(path: str | Path) -> dict[str, Any]:
    with fsspec.open(str(path), "rb") as file:
        return json.loads(file.read())


def ns(microseconds: float) -> int:
    """A `ts` or `dur` as the whole nanoseconds a viewer reads from it."""
    return round(microseconds * 1000)


def assert_well_formed(trace: dict[str, Any]) -> list[Event]:
    """What Perfetto needs: the envelope, the keys of every event, and complete slices properly nested per track."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit"} and trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    for event in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(event), event
    tracks: defaultdict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            assert event["dur"] >= 0, event
            tracks[event["pid"], event["tid"]].append((ns(event["ts"]), ns(event["ts"]) + ns(event["dur"])))
    for track, spans in tracks.items():
        open_ends: list[int] = []
        for start, end in sorted(spans, key=lambda span: (span[0], -span[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"a slice on track {track} overlaps its parent's end"
            open_ends.append(end)
    return events


def processes(events: list[Event]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}


def threads(events: list[Event], pid: int) -> dict[int, str]:
    return {
        e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid
    }


def slices(events: list[Event], cat: str, pid: int = 0) -> list[Event]:
    return [e for e in events if e["ph"] == "X" and e.get("cat") == cat and e["pid"] == pid]


def leaf_states(events: list[Event], pid: int = 0) -> list[Event]:
    """The stays in a state (a compound state's enclosing slice has no `entered_by`)."""
    return [e for e in slices(events, "state", pid) if "entered_by" in e["args"]]


def children(events: list[Event], parent: Event) -> list[Event]:
    start, end = ns(parent["ts"]), ns(parent["ts"]) + ns(parent["dur"])
    return [
        e
        for e in slices(events, "callback", parent["pid"])
        if start <= ns(e["ts"]) and ns(e["ts"]) + ns(e["dur"]) <= end and e["tid"] == parent["tid"]
    ]


def inside(event: Event, around: Event) -> bool:
    return ns(around["ts"]) <= ns(event["ts"]) and ns(event["ts"]) + ns(event["dur"]) <= ns(around["ts"]) + ns(
        around["dur"]
    )


def fit_with_validation(tmp_path: Path, **options: Any) -> L.Trainer:
    trainer = quiet_trainer(tmp_path, max_epochs=2, **options)
    trainer.fit(TinyModel(), make_loader(), make_loader())
    return trainer


# ---- one process ----------------------------------------------------------------------------------------------


def test_a_fits_trace_has_its_states_in_order_and_each_callback_as_measured(tmp_path: Path) -> None:
    trainer = fit_with_validation(tmp_path)
    history = trainer.history
    path = history.to_trace(tmp_path / "run.trace.json")
    assert path == str(tmp_path / "run.trace.json")
    events = assert_well_formed(read_trace(path))
    assert processes(events) == {0: "rank 0"}
    assert threads(events, 0) == {1: "states", 2: "transitions"}

    states = leaf_states(events)
    assert [e["name"] for e in states] == [r.dest for r in history if r.dest is not None]
    assert [ns(e["ts"]) for e in states] == sorted(ns(e["ts"]) for e in states)
    (fitting,) = [e for e in slices(events, "state") if e["name"] == "fitting"]
    assert all(inside(e, fitting) for e in states if e["name"].startswith("fitting."))
    assert not inside(states[-1], fitting) and states[-1]["name"] == "finished"

    transitions = slices(events, "transition")
    assert [e["name"] for e in transitions] == [r.trigger for r in history]
    for slice_, record in zip(transitions, history, strict=True):
        assert slice_["args"]["seq"] == record.seq and slice_["args"]["transition"] == record.transition
        callbacks = children(events, slice_)
        assert [e["name"] for e in callbacks] == [c.name for c in record.callbacks]
        assert [ns(e["dur"]) for e in callbacks] == [round(c.duration_s * 1e9) for c in record.callbacks]
        durations = [ns(e["dur"]) for e in callbacks]
        starts = [ns(slice_["ts"]) + sum(durations[:index]) for index in range(len(callbacks))]
        assert [ns(e["ts"]) for e in callbacks] == starts  # in order, one after the other, from the record's time

    stop = history[-1]
    assert stop.dest == "finished"
    assert transitions[-1]["args"]["guards"] == {g.name: g.value for g in stop.guards}
    assert transitions[-1]["args"]["reasons"]["fit_done"] == stop.guards[-1].reason
    assert stop.guards[-1].reason == "`max_epochs=2` reached"  # the stop reason a user reads
    steps = [e["args"]["value"] for e in events if e["ph"] == "C" and e["name"] == "global_step"]
    assert steps == [0, 4, 8]  # where the global step changed: two epochs of 4 batches


def test_a_failed_runs_trace_shows_the_exception(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    events = assert_well_formed(read_trace(trainer.history.to_trace(tmp_path / "failed.json")))
    interrupt = slices(events, "transition")[-1]
    assert interrupt["name"] == "interrupt"
    exception = interrupt["args"]["exception"]
    assert (exception["type"], exception["message"]) == ("Boom", "training_step")
    assert "raise Boom(hook)" in exception["traceback"]
    (marker,) = [e for e in events if e["ph"] == "i"]
    assert marker["name"] == "Boom: training_step" and ns(marker["ts"]) == ns(interrupt["ts"])
    last = leaf_states(events)[-1]
    assert (last["name"], last["args"]["left_by"]) == ("interrupted", None)


def test_trainer_history_stays_a_list_and_writes_its_trace_atomically_through_fsspec(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    assert trainer.history == [] and isinstance(trainer.history, list)
    with pytest.raises(ValueError, match="no records to trace"):
        trainer.history.to_trace(tmp_path / "nothing.json")
    trainer.fit(TinyModel(), make_loader())
    history = trainer.history
    assert isinstance(history, HistoryRecords) and history == list(history) and len(history) == len(list(history))
    assert history[0].trigger == "fit" and history[-1].dest == "finished"
    assert history.to_trace("memory://traces/fit/run.trace.json") == "memory://traces/fit/run.trace.json"
    assert fsspec.filesystem("memory").ls("/traces/fit", detail=False) == ["/traces/fit/run.trace.json"]
    assert_well_formed(read_trace("memory://traces/fit/run.trace.json"))


# ---- the time axis --------------------------------------------------------------------------------------------


def _record(history: History, trigger: str, source: str, dest: str | None, wall: float, rank: int) -> TransitionRecord:
    record = history.open(trigger, source, epoch=0, global_step=0, batch_idx=None, rank=rank)
    record.wall_time, record.dest = wall, dest
    record.transition = None if dest is None else f"{trigger}: {source} -> {dest}"
    return record


def test_ranks_share_the_wall_clock_axis_and_a_record_never_starts_inside_the_previous_one() -> None:
    start = 1_700_000_000.0
    ranks = []
    for rank, late in ((0, 0.0), (1, 0.5)):  # rank 1 reaches every transition half a second late
        history = History()
        _record(history, "fit", "idle", "fitting.setup", start + late, rank)
        _record(history, "begin", "fitting.setup", "fitting.training", start + late + 1.0, rank)
        ranks.append(history.records)
    ranks[0][0].callbacks = [CallbackRecord(name="setup", duration_s=1.25)]  # runs past `begin`
    trace = build_trace({"rank0.json": ranks[0], "rank1.json": ranks[1]})
    events = assert_well_formed(trace)
    assert processes(events) == {0: "rank 0", 1: "rank 1"}
    assert trace["otherData"]["wall_time_origin_ns"] == round(start * 1e9)
    starts = {pid: [ns(e["ts"]) for e in slices(events, "transition", pid)] for pid in (0, 1)}
    assert starts[1] == [500_000_000, 1_500_000_000]  # on rank 0's axis: half a second later
    assert starts[0] == [0, 1_250_000_000]  # begin waits for the callback that ran past its wall time


def test_one_history_per_rank() -> None:
    history = History()
    _record(history, "fit", "idle", "fitting.setup", 1.0, 0)
    with pytest.raises(ValueError, match="'a.json' and 'b.json' both hold rank 0's records: give one dump per rank"):
        build_trace({"a.json": history.records, "b.json": history.records})
    _record(history, "begin", "fitting.setup", "fitting.training", 2.0, 1)
    with pytest.raises(ValueError, match=r"history 'mixed.json' mixes the records of ranks \[0, 1\]"):
        build_trace({"mixed.json": history.records})


class DumpsEachRank(RankModel):
    """Each rank writes its history when its fit ends (the stop edge still running), as a user's hook would."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def teardown(self, stage: str) -> None:
        self.trainer.dump_history(self.folder / f"rank{self.global_rank}.json")


def test_two_real_ranks_give_two_processes_on_one_time_axis_with_their_profiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = L.Trainer(
        accelerator="cpu",
        strategy="ddp_fork",
        devices=2,
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        profiler=SimpleProfiler(dirpath=tmp_path, timeline=True),
    )
    trainer.fit(DumpsEachRank(tmp_path), loader(4))
    dumps = [str(tmp_path / f"rank{rank}.json") for rank in (0, 1)]
    profiles = [str(tmp_path / f"fit-{rank}.0.trace.json") for rank in (0, 1)]  # local rank in the name
    out = tmp_path / "run.trace.json"
    args = ["trace", *dumps, "--profile", profiles[0], "--profile", profiles[1], "-o", str(out)]
    assert main(args) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: ")

    trace = read_trace(out)
    events = assert_well_formed(trace)
    assert processes(events) == {0: "rank 0", 1: "rank 1"}
    firsts = [L.load_history(path).records[0] for path in dumps]
    origin = trace["otherData"]["wall_time_origin_ns"]
    fits = []
    for rank, first in enumerate(firsts):
        assert first.rank == rank
        (fit, *_) = slices(events, "transition", rank)
        assert ns(fit["ts"]) == round(first.wall_time * 1e9) - origin  # both ranks on one wall-clock axis
        fits.append(fit)
        steps = [
            e for e in slices(events, "profiler", rank) if e["name"] == "[LightningModule]DumpsEachRank.training_step"
        ]
        assert len(steps) == 4  # 32 samples, 2 ranks, batch 4: each rank's own steps on its own process
        assert threads(events, rank)[steps[0]["tid"]] == f"fit-{rank}.0.trace.json: SimpleProfiler"
    # The fit edge holds a barrier (prepare_data) that both ranks pass together: their fit slices overlap.
    assert max(ns(f["ts"]) for f in fits) < min(ns(f["ts"]) + ns(f["dur"]) for f in fits)


# ---- the command line ---------------------------------------------------------------------------------------


def quiet_trainer_dump(tmp_path: Path) -> str:
    trainer = quiet_trainer(tmp_path)
    trainer.fit(TinyModel(), make_loader())
    return trainer.dump_history(tmp_path / "history.json")


def test_the_public_command_writes_the_trace_and_keeps_the_other_commands(tmp_path: Path) -> None:
    dump = quiet_trainer_dump(tmp_path)
    out = tmp_path / "cli.trace.json"
    command = [sys.executable, "-m", "statemachine.history", "trace", dump, "-o", str(out)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {out}: {len(read_trace(out)['traceEvents'])} events, ranks 0\n"
    assert [e["name"] for e in leaf_states(assert_well_formed(read_trace(out)))][-1] == "finished"
    assert main(["check", dump]) == 0  # show, check and diff are the engine's, under the public path too


def _chrome(path: Path, **fields: Any) -> str:
    path.write_text(json.dumps({"traceEvents": [], **fields}))
    return str(path)


def test_the_command_refuses_bad_input_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = quiet_trainer_dump(tmp_path)
    copy = tmp_path / "copy.json"
    copy.write_bytes(Path(dump).read_bytes())
    chrome = _chrome(tmp_path / "chrome.json")
    ranked = _chrome(tmp_path / "ranked.json", baseTimeNanoseconds=1, distributedInfo={"rank": "one"})
    out = str(tmp_path / "out.json")
    cases = [
        (["trace", str(tmp_path / "missing.json"), "-o", out], "missing.json' does not exist"),
        (["trace", chrome, "-o", out], "chrome.json' has no format_version"),
        (["trace", dump, dump, "-o", out], "history.json' given more than once"),
        (["trace", dump, str(copy), "-o", out], "both hold rank 0's records: give one dump per rank"),
        (["trace", dump, "--profile", str(copy), "-o", out], "copy.json' is not a chrome trace: it has no traceEvents"),
        (["trace", dump, "--profile", chrome, "-o", out], "chrome.json' has no baseTimeNanoseconds"),
        (
            ["trace", dump, "--profile", ranked, "-o", out],
            "distributedInfo {'rank': 'one'}; its rank must be an int",
        ),
        (["trace", dump], "the following arguments are required: -o/--output"),
        (["trace", "-o", out], "the following arguments are required: DUMP"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert message in capsys.readouterr().err, argv
    assert not Path(out).exists()


# ---- profilers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [SimpleProfiler, AdvancedProfiler])
def test_a_profilers_timeline_joins_the_trace_when_asked(tmp_path: Path, kind: type) -> None:
    trainer = fit_with_validation(tmp_path, profiler=kind(timeline=True))
    (written,) = trainer.profiler.trace_files()
    assert written == str(tmp_path / "fit.0.trace.json")  # in the log directory, when the run ended
    plain = read_trace(trainer.history.to_trace(tmp_path / "plain.json"))
    assert not slices(plain["traceEvents"], "profiler")  # only when asked
    events = assert_well_formed(read_trace(trainer.history.to_trace(tmp_path / "run.json", profiler=trainer.profiler)))
    actions = slices(events, "profiler")
    names = [e["name"] for e in actions]
    assert names.count("[LightningModule]TinyModel.training_step") == 8
    assert names.count("train_dataloader_next") >= 8
    assert {e["tid"] for e in actions} == {10} and threads(events, 0)[10] == f"fit.0.trace.json: {kind.__name__}"
    (fitting,) = [e for e in slices(events, "state") if e["name"] == "fitting"]
    steps = [e for e in actions if e["name"].endswith("training_step")]
    assert all(inside(step, fitting) for step in steps)  # on the machine's time axis


def test_a_failed_run_still_writes_its_timeline(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, profiler=SimpleProfiler(timeline=True))
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="validation_step"), make_loader(), make_loader())
    events = assert_well_formed(read_trace(trainer.history.to_trace(tmp_path / "t.json", profiler=trainer.profiler)))
    assert "[LightningModule]TinyModel.validation_step" in {e["name"] for e in slices(events, "profiler")}


def test_the_pytorch_profilers_trace_is_merged_onto_the_machines_axis(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, profiler=PyTorchProfiler(filename="torch"), max_epochs=1)
    trainer.fit(TinyModel(), make_loader())
    assert trainer.profiler.trace_files() == [str(tmp_path / "fit-torch.0.pt.trace.json")]
    events = assert_well_formed(read_trace(trainer.history.to_trace(tmp_path / "run.json", profiler=trainer.profiler)))
    merged = [e for e in events if e["ph"] == "X" and e["tid"] >= 10]
    assert {e["pid"] for e in merged} == {0}
    steps = [e for e in merged if e["name"] == "[LightningModule]TinyModel.training_step"]
    assert len(steps) == 4
    (fitting,) = [e for e in slices(events, "state") if e["name"] == "fitting"]
    assert all(inside(step, fitting) for step in steps)
    assert any(e["name"] == "aten::linear" for e in merged)
    assert any(name.startswith("fit-torch.0.pt.trace.json: ") for name in threads(events, 0).values())


def test_a_profiler_without_a_trace_is_refused_with_what_to_do(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, profiler="simple")
    trainer.fit(TinyModel(), make_loader())
    with pytest.raises(ValueError, match=r"SimpleProfiler records no timeline .* SimpleProfiler\(timeline=True\)"):
        trainer.history.to_trace(tmp_path / "t.json", profiler=trainer.profiler)
    with pytest.raises(ValueError, match="has written no timeline yet"):
        trainer.history.to_trace(tmp_path / "t.json", profiler=SimpleProfiler(timeline=True))
    with pytest.raises(ValueError, match="PassThroughProfiler writes no chrome trace"):
        trainer.history.to_trace(tmp_path / "t.json", profiler=PassThroughProfiler())
    with pytest.raises(ValueError, match="hands its traces to your on_trace_ready"):
        trainer.history.to_trace(tmp_path / "t.json", profiler=PyTorchProfiler(on_trace_ready=print))
    with pytest.raises(ValueError, match=r"PyTorchProfiler\(export_to_chrome=False\) writes no chrome trace"):
        trainer.history.to_trace(tmp_path / "t.json", profiler=PyTorchProfiler(export_to_chrome=False))
    with pytest.raises(TypeError, match="profiler=str lists no chrome traces"):
        trainer.history.to_trace(tmp_path / "t.json", profiler="simple")  # type: ignore[arg-type]
    assert not (tmp_path / "t.json").exists()


def test_merged_profiles_keep_their_threads_and_flow_ids_apart() -> None:
    history = History()
    _record(history, "fit", "idle", "fitting.setup", 1_700_000_000.0, 0)

    def profile(rank: int) -> dict[str, Any]:
        # torch.profiler's arrow from a CPU op to its kernel: a flow start and end sharing an id within the file
        events = [
            {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "ts": 0, "args": {"name": "thread 7 (python)"}},
            {"ph": "X", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 10.0, "dur": 5.0},
            {"ph": "s", "name": "ac2g", "id": 1, "pid": 7, "tid": 7, "ts": 10.0},
            {"ph": "f", "name": "ac2g", "id": 1, "bp": "e", "pid": 0, "tid": 9, "ts": 20.0},
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 30.0},
        ]
        return {"traceEvents": events, "baseTimeNanoseconds": 1_700_000_000 * 10**9, "distributedInfo": {"rank": rank}}

    trace = build_trace({"rank0.json": history.records}, {"a/p0.json": profile(0), "b/p1.json": profile(1)})
    events = assert_well_formed(trace)
    assert processes(events) == {0: "rank 0", 1: "rank 1"}  # a profile's rank gets its process without a dump
    assert threads(events, 1) == {10: "p1.json: thread 7 (python)", 11: "p1.json: 0 9", 12: "p1.json: events"}
    flows = {(e["pid"], e["ph"]): e["id"] for e in events if e["ph"] in "sf"}
    assert flows[0, "s"] == flows[0, "f"] != flows[1, "s"] == flows[1, "f"]
    (mm,) = [e for e in events if e["name"] == "aten::mm" and e["pid"] == 1]
    assert (ns(mm["ts"]), ns(mm["dur"])) == (10_000, 5_000)  # the same wall-clock base as the history
    ends = [e for e in events if e["name"] == "Record Window End"]
    assert [(e["pid"], e["s"]) for e in ends] == [(0, "p"), (1, "p")]  # a profile's global marker marks its rank
