"""The profiler contract: time named actions of a run, then report them when the run ends.

A report goes to `{dirpath}/{stage}-{filename}.txt` (any fsspec URL) when a filename is given, else it is
printed. `dirpath` defaults to the trainer's log directory. A profiler that writes chrome traces of its runs lists
them in `trace_files()`, for `trainer.history.to_trace(path, profiler=...)`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import fsspec

from stages.rank_zero import rank_zero_info
from statemachine.engine.history import join_path, write_atomic


class Profiler(ABC):
    """Base class: `start`/`stop` bracket an action, `summary` turns what was recorded into text."""

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.filename = filename
        self._stage: str | None = None
        self._reported_stage: str | None = None  # the run `summary` reports on, kept after it ends
        self._local_rank: int | None = None
        self._lightning_module: Any = None
        self._trace_files: list[str] = []

    @abstractmethod
    def start(self, action_name: str) -> None:
        """Begin timing `action_name`."""

    @abstractmethod
    def stop(self, action_name: str) -> None:
        """End timing `action_name`."""

    @abstractmethod
    def summary(self) -> str:
        """The report of everything recorded since `setup`."""

    @contextmanager
    def profile(self, action_name: str) -> Iterator[str]:
        self.start(action_name)
        try:
            yield action_name
        finally:
            self.stop(action_name)

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Called when a run starts: which entry point it is, and where reports go unless `dirpath` was given."""
        self._stage = self._reported_stage = stage
        self._local_rank = local_rank
        self.dirpath = self.dirpath or log_dir

    def describe(self) -> None:
        """Report this run; `summary()` still returns it until the next run starts from zero."""
        summary = self.summary()
        if summary:
            if self.filename and self.dirpath:
                _append(join_path(self.dirpath, self._prepare_filename()), summary)
            else:
                rank_zero_info(summary)  # Lightning's way: an INFO line, shown on the console by default
        self.teardown(self._stage)

    def teardown(self, stage: str | None) -> None:
        """The run is over (normally or not); subclasses also drop what they recorded."""
        self._stage = None
        self._lightning_module = None

    def trace_files(self) -> list[str]:
        """The chrome traces this profiler wrote, one per run (or per recorded cycle), oldest first."""
        if not self._trace_files:
            raise ValueError(self._why_no_trace_files())
        return list(self._trace_files)

    def _why_no_trace_files(self) -> str:
        return (
            f"{type(self).__name__} writes no chrome trace of its actions; SimpleProfiler(timeline=True), "
            "AdvancedProfiler(timeline=True) and PyTorchProfiler do"
        )

    def _write_trace(self, data: bytes, extension: str) -> str:
        """Write one of this profiler's chrome traces as `{stage}-{filename}[-{local_rank}].{n}{extension}`."""
        path = self._output_path(self._prepare_filename(extension=f".{len(self._trace_files)}{extension}"))
        write_atomic(path, data)
        self._trace_files.append(path)
        return path

    def _prepare_filename(self, action_name: str | None = None, extension: str = ".txt", split_token: str = "-") -> str:
        """`{stage}-{filename}[-{local_rank}][-{action}]{extension}`, leaving out the parts that are unset."""
        parts = [self._stage, self.filename, None if self._local_rank is None else str(self._local_rank), action_name]
        return split_token.join(part for part in parts if part) + extension

    def _output_path(self, name: str) -> str:
        return join_path(self.dirpath or os.getcwd(), name)

    def _title(self) -> str:
        return f"{(self._reported_stage or '').upper()} Profiler Report".strip()


class PassThroughProfiler(Profiler):
    """What `profiler=None` means: records nothing and reports nothing."""

    def start(self, action_name: str) -> None:
        """Nothing is timed."""

    def stop(self, action_name: str) -> None:
        """Nothing is timed."""

    def summary(self) -> str:
        return ""


def _append(path: str, text: str) -> None:
    """Append through fsspec; object stores have no append mode, so read the old text and write both."""
    fs, local = fsspec.core.url_to_fs(path)
    previous = fs.cat_file(local).decode() if fs.exists(local) else ""
    write_atomic(path, (previous + text + "\n").encode())
