"""The machine's history: one record per transition attempt, kept in a bounded ring buffer.

A record says which trigger fired in which state, which edge was taken (or that none was), the guard outcomes,
each callback with its duration, the trainer's position (epoch, step, batch, rank) and the exception if any.
Dumps are JSON written through fsspec (local paths, `memory://`, `s3://`, ...), stamped with a format version
and the table's digest so a dump can be checked against the table it ran on:

    python -m statemachine.engine.history show run.json     # a readable table
    python -m statemachine.engine.history check run.json    # is this a legal path through the table?

`python -m statemachine.history` is the public command line: these commands and `trace` (a timeline).
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import sys
import time
import traceback
import uuid
import warnings
from collections import deque
from collections.abc import Collection, Sequence
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel, Field, ValidationError

from stages.exceptions import TrainerWarning
from statemachine.engine.table import TABLE, MachineTable, TransitionSpec

FORMAT_VERSION = 1


class GuardRecord(BaseModel):
    """A guard's outcome; `reason` is what a guard that explains itself said (e.g. why fit stops)."""

    name: str
    value: bool
    reason: str | None = None


class CallbackRecord(BaseModel):
    """A callback's duration, its error if it failed, and the note it returned (e.g. the resume point)."""

    name: str
    duration_s: float
    error: str | None = None
    note: str | None = None


class ExceptionRecord(BaseModel):
    type: str
    message: str
    traceback: str

    @classmethod
    def from_exception(cls, exc: BaseException) -> ExceptionRecord:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type=type(exc).__qualname__, message=str(exc), traceback=text)


class TransitionRecord(BaseModel):
    """One trigger attempt. The machine creates it with `History.open` and fills it in place.

    `transition` is the key of the edge that was taken (None: refused, or failed before a guard passed);
    `dest` is the state the machine ended in when the state changed (None: it did not change).
    """

    seq: int
    wall_time: float
    monotonic_time: float
    trigger: str
    source: str
    transition: str | None = None
    dest: str | None = None
    guards: list[GuardRecord] = Field(default_factory=list)
    callbacks: list[CallbackRecord] = Field(default_factory=list)
    epoch: int
    global_step: int
    batch_idx: int | None = None
    rank: int = 0
    exception: ExceptionRecord | None = None

    @property
    def end_state(self) -> str:
        return self.dest or self.source

    @property
    def refused(self) -> bool:
        return self.transition is None and self.exception is None


class HistoryDump(BaseModel):
    format_version: int
    table_digest: str
    dropped: int
    records: list[TransitionRecord]

    def matches(self, table: MachineTable = TABLE) -> bool:
        """Whether the dump was written by a run of `table` (same digest)."""
        return self.table_digest == table.digest


class History:
    """A bounded ring buffer of transition records: a long run keeps the newest `maxlen`, counts the rest."""

    def __init__(self, maxlen: int = 10_000) -> None:
        if not isinstance(maxlen, int) or isinstance(maxlen, bool) or maxlen < 1:
            raise ValueError(f"History maxlen must be a positive int, got {maxlen!r}")
        self._records: deque[TransitionRecord] = deque(maxlen=maxlen)
        self._next_seq = 0
        self._dropped = 0

    def open(
        self, trigger: str, source: str, *, epoch: int, global_step: int, batch_idx: int | None, rank: int
    ) -> TransitionRecord:
        record = TransitionRecord(
            seq=self._next_seq,
            wall_time=time.time(),
            monotonic_time=time.monotonic(),
            trigger=trigger,
            source=source,
            epoch=epoch,
            global_step=global_step,
            batch_idx=batch_idx,
            rank=rank,
        )
        if len(self._records) == self._records.maxlen:
            self._dropped += 1
        self._records.append(record)
        self._next_seq += 1
        return record

    @property
    def records(self) -> list[TransitionRecord]:
        return list(self._records)

    def since_last(self, triggers: Collection[str]) -> list[TransitionRecord]:
        """The records from the newest one whose trigger is in `triggers` (the current run's entry) onwards."""
        for index in range(len(self._records) - 1, -1, -1):
            if self._records[index].trigger in triggers:
                return list(self._records)[index:]
        return self.records

    @property
    def dropped(self) -> int:
        """How many of the oldest records the ring buffer evicted."""
        return self._dropped

    def __len__(self) -> int:
        return len(self._records)

    def to_dump(self, table: MachineTable = TABLE) -> HistoryDump:
        return HistoryDump(
            format_version=FORMAT_VERSION,
            table_digest=table.digest,
            dropped=self._dropped,
            records=self.records,
        )

    def dump(
        self,
        path: str | os.PathLike[str],
        *,
        table: MachineTable = TABLE,
        storage_options: dict | None = None,
    ) -> str:
        """Write the history as JSON to `path` (anything fsspec writes), never leaving a half-written file."""
        path = os.fspath(path)
        data = self.to_dump(table).model_dump_json(indent=1).encode()
        write_atomic(path, data, storage_options)
        return path


def join_path(directory: str, name: str) -> str:
    """`directory/name` for a local directory or an fsspec URL (whose separator is always `/`)."""
    return posixpath.join(directory, name) if "://" in directory else os.path.join(directory, name)


def write_atomic(path: str, data: bytes, storage_options: dict | None = None) -> None:
    """Write `data` under a temporary name next to `path`, then move it over `path`; creates parent dirs."""
    fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    if isinstance(fs, LocalFileSystem):
        _write_local_atomic(fs_path, data)
    else:
        _write_remote_atomic(fs, fs_path, data)


def _write_local_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    # os.open with 0o666 lets the umask decide the final permissions, as for any newly created file.
    handle = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def _write_remote_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    parent = posixpath.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with fs.open(temp, "wb") as file:
            file.write(data)
        fs.mv(temp, path)
    except BaseException:
        if fs.exists(temp):
            fs.rm(temp)
        raise


def read_json_object(path: str, what: str, storage_options: dict | None = None) -> dict[str, Any]:
    """The JSON object in `path` (any fsspec URL; a `.gz` file is read decompressed); each failure names `what` and
    the file."""
    try:
        with fsspec.open(path, "rb", compression="infer", **(storage_options or {})) as file:
            raw = file.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path!r} does not exist") from None
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise ValueError(f"{what} {path!r} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path!r} must hold a JSON object, got {type(data).__name__}")
    return data


def load_history(path: str | os.PathLike[str], storage_options: dict | None = None) -> HistoryDump:
    """Read a dump written by `History.dump`; every failure names the file and what is wrong with it."""
    path = os.fspath(path)
    data = read_json_object(path, "history dump", storage_options)
    _check_version(path, data)
    try:
        return HistoryDump.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"history dump {path!r} has the wrong shape: {_describe(err)}") from None


def _check_version(path: str, data: dict) -> None:
    # Checked before the shape: a future format may change the shape, and its version is the useful message.
    if "format_version" not in data:
        raise ValueError(f"history dump {path!r} has no format_version; expected {FORMAT_VERSION}")
    version = data["format_version"]
    if version != FORMAT_VERSION:
        raise ValueError(
            f"history dump {path!r} has format_version {version!r}; this version reads format_version {FORMAT_VERSION}"
        )


def _describe(err: ValidationError, limit: int = 5) -> str:
    errors = err.errors()
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in errors[:limit]]
    more = f" (and {len(errors) - limit} more)" if len(errors) > limit else ""
    return "; ".join(parts) + more


def warn_on_table_mismatch(dump: HistoryDump, table: MachineTable = TABLE) -> bool:
    """Warn when a dump came from another table: its path would be judged by a table it did not run on."""
    if dump.matches(table):
        return True
    warnings.warn(
        f"history dump was written with table {dump.table_digest}, the current table is {table.digest}; "
        "states and transitions may have changed since",
        TrainerWarning,
        stacklevel=2,
    )
    return False


# ---- legality ---------------------------------------------------------------------------------------------


def check_path(
    records: Sequence[TransitionRecord], table: MachineTable = TABLE, *, from_initial: bool = True
) -> list[str]:
    """The problems that make `records` an illegal path through `table`; an empty list means legal.

    Pass `from_initial=False` when older records were dropped (the path then starts mid-run).
    """
    by_key = {t.key: t for t in table.transitions}
    problems: list[str] = []
    if records and from_initial and records[0].source != table.initial:
        first = records[0]
        problems.append(f"seq {first.seq}: path starts in {first.source!r}, not in {table.initial!r}")
    previous: TransitionRecord | None = None
    for record in records:
        if previous is not None and record.source != previous.end_state:
            problems.append(
                f"seq {record.seq}: source {record.source!r} is not where seq {previous.seq} "
                f"ended ({previous.end_state!r})"
            )
        problems += _record_problems(record, by_key)
        previous = record
    return problems


def _record_problems(record: TransitionRecord, by_key: dict[str, TransitionSpec]) -> list[str]:
    where = f"seq {record.seq}"
    if record.transition is None:
        if record.dest is not None:
            return [f"{where}: state changed to {record.dest!r} without a transition"]
        return []
    spec = by_key.get(record.transition)
    if spec is None:
        return [f"{where}: {record.transition!r} is not a declared transition"]
    problems = []
    if spec.source != record.source:
        problems.append(f"{where}: {record.transition!r} taken from {record.source!r}")
    if spec.trigger != record.trigger:
        problems.append(f"{where}: {record.transition!r} taken on trigger {record.trigger!r}")
    if record.dest is not None and record.dest != spec.dest:
        problems.append(f"{where}: {record.transition!r} ended in {record.dest!r}")
    return problems


# ---- viewer -----------------------------------------------------------------------------------------------

_COLUMNS = ("seq", "time", "trigger", "source -> end state", "guards", "epoch/step/batch", "callbacks")


def format_table(dump: HistoryDump, table: MachineTable = TABLE) -> str:
    """A fixed-width table of the dump, one line per record; reasons, notes and errors indented below."""
    start = dump.records[0].wall_time if dump.records else 0.0
    rows = [_COLUMNS] + [_row(record, start) for record in dump.records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
    lines = [_header(dump, table)]
    for index, row in enumerate(rows):
        cells = [cell.rjust(w) if i < 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if index:
            lines += _detail_lines(dump.records[index - 1])
    return "\n".join(lines)


def _header(dump: HistoryDump, table: MachineTable) -> str:
    match = "matches the current table" if dump.matches(table) else f"DIFFERS from current table {table.digest}"
    return (
        f"history format {dump.format_version}, table {dump.table_digest} ({match}), "
        f"{len(dump.records)} records, {dump.dropped} dropped"
    )


def _row(record: TransitionRecord, start: float) -> tuple[str, ...]:
    if record.refused:
        move = f"{record.source} -> (refused)"
    elif record.exception is not None and record.dest is None:
        move = f"{record.source} -> (failed)"
    else:
        move = f"{record.source} -> {record.end_state}"
    guards = " ".join(f"{g.name}={'T' if g.value else 'F'}" for g in record.guards) or "-"
    batch = "-" if record.batch_idx is None else str(record.batch_idx)
    position = f"{record.epoch}/{record.global_step}/{batch}"
    if record.rank:
        position += f" rank {record.rank}"
    callbacks = ", ".join(f"{c.name} {c.duration_s * 1000:.1f}ms" for c in record.callbacks) or "-"
    elapsed = f"{record.wall_time - start:.3f}s"
    return (str(record.seq), elapsed, record.trigger, move, guards, position, callbacks)


def _detail_lines(record: TransitionRecord) -> list[str]:
    lines = [f"      {g.name}: {g.reason}" for g in record.guards if g.reason]
    lines += [f"      {c.name}: {c.note}" for c in record.callbacks if c.note]
    lines += [f"      ! callback {c.name} failed: {c.error}" for c in record.callbacks if c.error is not None]
    if record.exception is not None:
        lines.append(f"      ! {record.exception.type}: {record.exception.message}")
    return lines


# ---- command line -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m statemachine.engine.history", description="Inspect a state-machine history dump."
    )
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run_command(parser, parser.parse_args(argv))


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `show`, `check` and `diff` commands, for this module's command line and the public one."""
    for name, help_text in (
        ("show", "print the dump as a table"),
        ("check", "check that it is a legal path"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("path", help="dump file or fsspec URL")
        command.add_argument(
            "--table", default=None, metavar="MODULE:ATTR", help="the table the run used (default: the built-in one)"
        )
    diff = commands.add_parser("diff", help="report the first transition where two ranks' dumps differ")
    diff.add_argument("path", help="dump file or fsspec URL (for example rank 0's)")
    diff.add_argument("other", help="the dump to compare with (for example rank 1's)")


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run a command `add_commands` added; its exit status."""
    if args.command == "diff":
        return _run_diff(parser, args.path, args.other)
    try:
        table = TABLE if args.table is None else load_table(args.table)
        dump = load_history(args.path)
    except (FileNotFoundError, ValueError, ImportError, AttributeError) as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    if args.command == "show":
        print(format_table(dump, table))
        return 0
    return _run_check(dump, table)


def load_table(path: str) -> MachineTable:
    """The table at `module:attribute` (a user's extended table, for the command-line tools)."""
    from statemachine.engine.binding import resolve_object

    table = resolve_object(path)
    if not isinstance(table, MachineTable):
        raise ValueError(f"{path!r} is a {type(table).__name__}, not a MachineTable")
    return table


def _step_of(record: TransitionRecord) -> tuple[Any, ...]:
    """What every rank must share for one transition: the edge and where in training it was taken."""
    return (record.trigger, record.source, record.transition, record.dest, record.epoch, record.global_step)


def _describe_step(record: TransitionRecord) -> str:
    edge = record.transition or ("refused" if record.refused else "failed")
    place = f"epoch {record.epoch}, step {record.global_step}"
    error = f", {record.exception.type}: {record.exception.message}" if record.exception else ""
    return f"rank {record.rank}: seq {record.seq} {record.trigger!r} in {record.source} -> {edge} ({place}{error})"


def first_divergence(first: HistoryDump, second: HistoryDump) -> str | None:
    """Where two dumps (two ranks of one run) stop taking the same transitions; None when they agree."""
    for mine, theirs in zip(first.records, second.records, strict=False):
        if _step_of(mine) != _step_of(theirs):
            return f"first difference:\n  {_describe_step(mine)}\n  {_describe_step(theirs)}"
    if len(first.records) != len(second.records):
        longer = first if len(first.records) > len(second.records) else second
        extra = longer.records[min(len(first.records), len(second.records))]
        return f"one dump goes on after the other ends:\n  {_describe_step(extra)}"
    return None


def _run_diff(parser: argparse.ArgumentParser, path: str, other: str) -> int:
    try:
        dumps = load_history(path), load_history(other)
    except (FileNotFoundError, ValueError) as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    if dumps[0].dropped or dumps[1].dropped:
        print("warning: a dump dropped its oldest records; compared from the oldest kept ones")
    found = first_divergence(*dumps)
    if found is None:
        print(f"same transitions: {len(dumps[0].records)} records")
        return 0
    print(found)
    return 1


def _run_check(dump: HistoryDump, table: MachineTable = TABLE) -> int:
    if not dump.matches(table):
        print(f"warning: dump table {dump.table_digest} differs from the current table {table.digest}")
    problems = check_path(dump.records, table, from_initial=dump.dropped == 0)
    for problem in problems:
        print(problem)
    if problems:
        print(f"illegal path: {len(problems)} problem(s) in {len(dump.records)} records")
        return 1
    print(f"legal path: {len(dump.records)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
