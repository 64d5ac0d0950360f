"""History: the ring buffer, JSON dumps through fsspec, the legality check and the command-line viewer."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import fsspec
import pytest

from statemachine.engine.history import (
    FORMAT_VERSION,
    CallbackRecord,
    ExceptionRecord,
    GuardRecord,
    History,
    HistoryDump,
    TransitionRecord,
    check_path,
    format_table,
    load_history,
    main,
    warn_on_table_mismatch,
)
from statemachine.engine.table import TABLE

# A fit with a sanity check, a mid-epoch validation, a second epoch and the stop: (trigger, dest, guards).
FIT_PATH = [
    ("fit", "fitting.setup", []),
    ("begin", "fitting.sanity_checking", [("resumes_inside_epoch", False), ("should_sanity_check", True)]),
    ("sanity_check_done", "fitting.train_setup", []),
    ("train_ready", "fitting.between_epochs", [("fit_done", False), ("resumes_mid_epoch", False)]),
    ("epoch_boundary", "fitting.training", [("fit_done", False)]),
    (
        "val_check",
        "fitting.validating",
        [
            ("validates_at_epoch_end", False),
            ("validates_before_stop", False),
            ("val_time_elapsed", False),
            ("val_batches_counted", True),
        ],
    ),
    ("validation_done", "fitting.training", []),
    ("epoch_done", "fitting.between_epochs", []),
    ("epoch_boundary", "fitting.training", [("fit_done", False)]),
    ("epoch_done", "fitting.between_epochs", []),
    ("epoch_boundary", "finished", [("fit_done", True)]),
]


def take(history: History, trigger: str, dest: str, guards: list[tuple[str, bool]]) -> TransitionRecord:
    """Record the declared transition `trigger` -> `dest` from the current state, as the machine does."""
    source = history.records[-1].end_state if len(history) else TABLE.initial
    passed = {name for name, value in guards if value}
    found = [t for t in TABLE.candidates(trigger, source) if t.dest == dest]
    (spec,) = found if len(found) == 1 else [t for t in found if t.guard_name in passed]  # the val_check edges
    record = history.open(trigger, source, epoch=0, global_step=len(history), batch_idx=None, rank=0)
    record.guards = [GuardRecord(name=name, value=value) for name, value in guards]
    record.transition = spec.key
    record.callbacks = [CallbackRecord(name=name, duration_s=0.002) for name in spec.callbacks]
    record.dest = dest
    return record


def fit_history() -> History:
    history = History()
    for trigger, dest, guards in FIT_PATH:
        take(history, trigger, dest, guards)
    return history


# ---- records and the ring buffer --------------------------------------------------------------------------


def test_ring_buffer_keeps_the_newest_records_and_counts_the_dropped_ones() -> None:
    history = History(maxlen=3)
    for index in range(5):
        history.open("fit", "idle", epoch=0, global_step=index, batch_idx=None, rank=0)
    assert len(history) == 3
    assert history.dropped == 2
    assert [r.seq for r in history.records] == [2, 3, 4]
    assert [r.global_step for r in history.records] == [2, 3, 4]


@pytest.mark.parametrize("maxlen", [0, -1, 2.5, True])
def test_history_refuses_a_bad_maxlen(maxlen: object) -> None:
    with pytest.raises(ValueError, match="positive int"):
        History(maxlen=maxlen)  # type: ignore[arg-type]


def test_open_stamps_both_clocks_and_the_position() -> None:
    before_wall, before_mono = time.time(), time.monotonic()
    record = History().open("val_check", "fitting.training", epoch=3, global_step=40, batch_idx=7, rank=1)
    assert before_wall <= record.wall_time <= time.time()
    assert before_mono <= record.monotonic_time <= time.monotonic()
    assert (record.seq, record.epoch, record.global_step, record.batch_idx, record.rank) == (0, 3, 40, 7, 1)
    assert record.transition is None and record.dest is None
    assert record.guards == [] and record.callbacks == []


def test_end_state_and_refused() -> None:
    record = History().open("val_check", "fitting.training", epoch=0, global_step=0, batch_idx=0, rank=0)
    assert record.refused and record.end_state == "fitting.training"
    record.transition, record.dest = "val_check: fitting.training -> fitting.validating", "fitting.validating"
    assert not record.refused and record.end_state == "fitting.validating"
    failed = History().open("fit", "idle", epoch=0, global_step=0, batch_idx=None, rank=0)
    failed.exception = ExceptionRecord(type="ValueError", message="bad", traceback="")
    assert not failed.refused and failed.end_state == "idle"


def test_exception_record_keeps_type_message_and_traceback() -> None:
    def explode() -> None:
        raise KeyError("missing")

    try:
        explode()
    except KeyError as exc:
        record = ExceptionRecord.from_exception(exc)
    assert record.type == "KeyError"
    assert record.message == "'missing'"
    assert "in explode" in record.traceback and "KeyError: 'missing'" in record.traceback


# ---- dump and load ----------------------------------------------------------------------------------------


def test_dump_and_load_round_trip_through_memory_fs() -> None:
    history = fit_history()
    path = "memory://runs/round-trip/history.json"
    assert history.dump(path) == path
    dump = load_history(path)
    assert dump.format_version == FORMAT_VERSION
    assert dump.table_digest == TABLE.digest and dump.matches(TABLE)
    assert dump.dropped == 0
    assert dump.records == history.records
    fs = fsspec.filesystem("memory")
    assert fs.ls("/runs/round-trip", detail=False) == ["/runs/round-trip/history.json"]  # no temp file left


def test_dump_to_a_local_file_creates_parents_and_leaves_no_temp_file(tmp_path: Path) -> None:
    history = History(maxlen=2)
    for trigger, dest, guards in FIT_PATH[:6]:
        take(history, trigger, dest, guards)
    path = tmp_path / "logs" / "version_0" / "history.json"
    assert history.dump(path) == str(path)
    assert os.listdir(path.parent) == ["history.json"]
    dump = load_history(str(path))
    assert dump.dropped == 4
    assert [r.trigger for r in dump.records] == ["epoch_boundary", "val_check"]
    assert json.loads(path.read_text())["format_version"] == FORMAT_VERSION


def test_load_names_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_history(missing)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object, got list"),
        ('{"table_digest": "x"}', "has no format_version; expected 1"),
        ('{"format_version": 99, "records": []}', "format_version 99; this version reads format_version 1"),
        ('{"format_version": 1, "table_digest": "x", "dropped": 0}', "wrong shape: records: Field required"),
        (
            '{"format_version": 1, "table_digest": "x", "dropped": 0, "records": [{"seq": "first"}]}',
            r"wrong shape: records\.0\.seq",
        ),
    ],
)
def test_load_names_the_file_and_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as info:
        load_history(path)
    assert "broken.json" in str(info.value)


def test_table_mismatch_is_detected_and_warned() -> None:
    dump = fit_history().to_dump()
    assert warn_on_table_mismatch(dump)
    foreign = dump.model_copy(update={"table_digest": "0000000000000000"})
    assert not foreign.matches(TABLE)
    with pytest.warns(UserWarning, match=f"0000000000000000, the current table is {TABLE.digest}"):
        assert not warn_on_table_mismatch(foreign)


# ---- legality ---------------------------------------------------------------------------------------------


def test_a_full_fit_is_a_legal_path() -> None:
    assert check_path(fit_history().records) == []


def test_refused_and_failed_attempts_keep_the_path_legal() -> None:
    history = History()
    take(history, "fit", "fitting.setup", [])
    history.open("val_check", "fitting.setup", epoch=0, global_step=0, batch_idx=None, rank=0)  # refused
    failed = history.open("begin", "fitting.setup", epoch=0, global_step=0, batch_idx=None, rank=0)
    failed.exception = ExceptionRecord(type="RuntimeError", message="rng", traceback="")
    take(history, "interrupt", "interrupted", [])
    assert check_path(history.records) == []


def test_skipping_a_state_is_reported() -> None:
    records = fit_history().records
    del records[2]  # sanity_check_done: validation then seems to start from sanity_checking
    problems = check_path(records)
    assert problems == ["seq 3: source 'fitting.train_setup' is not where seq 1 ended ('fitting.sanity_checking')"]


def test_undeclared_and_inconsistent_transitions_are_reported() -> None:
    history = fit_history()
    records = history.records
    records[1].transition = "begin: fitting.setup -> finished"
    records[5].dest = "finished"
    records[8].transition = "epoch_boundary: fitting.between_epochs -> finished [fit_done]"
    problems = check_path(records)
    assert "seq 1: 'begin: fitting.setup -> finished' is not a declared transition" in problems
    val_check = "val_check: fitting.training -> fitting.validating [val_batches_counted]"
    assert f"seq 5: '{val_check}' ended in 'finished'" in problems
    assert (
        "seq 8: 'epoch_boundary: fitting.between_epochs -> finished [fit_done]' ended in 'fitting.training'" in problems
    )


def test_the_start_must_be_the_initial_state_unless_records_were_dropped() -> None:
    records = fit_history().records[2:]
    assert check_path(records) == ["seq 2: path starts in 'fitting.sanity_checking', not in 'idle'"]
    assert check_path(records, from_initial=False) == []


def test_a_state_change_without_a_transition_is_reported() -> None:
    records = fit_history().records
    records.append(History().open("finish", "finished", epoch=0, global_step=0, batch_idx=None, rank=0))
    records[-1].seq, records[-1].dest = 8, "idle"
    assert check_path(records) == ["seq 8: state changed to 'idle' without a transition"]


# ---- viewer and command line ------------------------------------------------------------------------------


def test_format_table_shows_each_attempt_readably() -> None:
    history = fit_history()
    crash = history.open("interrupt", "finished", epoch=2, global_step=9, batch_idx=None, rank=0)
    crash.exception = ExceptionRecord(type="OSError", message="disk full", traceback="")
    crash.callbacks = [CallbackRecord(name="dump_history", duration_s=0.5, error="OSError: disk full")]
    for index, record in enumerate(history.records):
        record.wall_time = 1_700_000_000 + index * 0.25
    text = format_table(history.to_dump())
    lines = text.splitlines()
    assert lines[0] == (f"history format 1, table {TABLE.digest} (matches the current table), 12 records, 0 dropped")
    assert re.fullmatch(r"seq +time +trigger +source -> end state +guards +epoch/step/batch +callbacks", lines[1])
    assert re.search(r"epoch_boundary +fitting\.between_epochs -> fitting\.training +fit_done=F +0/8/- +-\n", text)
    assert re.search(r"\n +10 +2\.500s +epoch_boundary +fitting\.between_epochs -> finished +fit_done=T", text)
    assert "end_training 2.0ms" in text
    assert "finished -> (failed)" in text
    assert "      ! callback dump_history failed: OSError: disk full" in lines
    assert lines[-1] == "      ! OSError: disk full"
    assert lines[2].split()[:2] == ["0", "0.000s"]


def test_format_table_of_an_empty_foreign_dump() -> None:
    dump = HistoryDump(format_version=1, table_digest="feedfacefeedface", dropped=4, records=[])
    assert format_table(dump).splitlines()[0] == (
        f"history format 1, table feedfacefeedface (DIFFERS from current table {TABLE.digest}), 0 records, 4 dropped"
    )


def test_cli_show_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    legal = fit_history().dump(tmp_path / "legal.json")
    assert main(["show", legal]) == 0
    assert "sanity_check_done" in capsys.readouterr().out
    assert main(["check", legal]) == 0
    assert capsys.readouterr().out == "legal path: 11 records\n"

    history = fit_history()
    stop = "epoch_boundary: fitting.between_epochs -> finished [fit_done]"
    history.records[5].transition = stop
    illegal = history.dump(tmp_path / "illegal.json")
    assert main(["check", illegal]) == 1
    out = capsys.readouterr().out
    assert f"seq 5: '{stop}' taken from 'fitting.training'" in out
    assert f"seq 5: '{stop}' taken on trigger 'val_check'" in out
    assert f"seq 5: '{stop}' ended in 'fitting.validating'" in out
    assert "illegal path: 3 problem(s) in 11 records" in out


def test_cli_bad_usage_and_bad_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["frobnicate", "x"], ["check", str(tmp_path / "missing.json")]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
    assert "missing.json' does not exist" in capsys.readouterr().err
