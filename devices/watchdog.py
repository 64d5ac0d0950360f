"""A side channel between ranks, so that one rank's failure ends the run everywhere within seconds.

Collectives cannot carry the news: the ranks still running are blocked in one, or will be at the next. The
rendezvous store can. The first rank to fail writes its rank and error under one key (compare-and-set: the first
writer wins); a thread on every rank polls that key. A rank that learns of a peer's failure while its main thread
runs Python code gets `PeerFailedError` raised there. A rank blocked inside a collective is released by the failed
rank tearing down its process group, which makes the collective fail at once.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

_log = logging.getLogger(__name__)

FAILURE_KEY = "first_failure"
_POLL_SECONDS = 0.1
# Frames from these files mean the main thread is inside a blocking collective or autograd: an exception raised
# there asynchronously would land in torch internals, and the failed peer's teardown already makes the call fail.
_BLOCKING_FILES = ("distributed_c10d.py", "autograd/__init__.py", "autograd/graph.py", "_tensor.py")


def describe_failure(rank: int, message: str) -> str:
    return f"rank {rank} failed first: {message}"


class PeerFailedError(RuntimeError):
    """Another rank failed first; this rank stopped because of it. The message names that rank and its error.
    Without arguments (as the watch raises it asynchronously) it describes the failure the active watch read."""

    def __init__(self, message: str = "", rank: int | None = None) -> None:
        super().__init__(message or PeerWatch.describe_active())
        self.rank = PeerWatch.active_failure_rank() if rank is None else rank

    @classmethod
    def of(cls, failure: tuple[int, str]) -> PeerFailedError:
        return cls(describe_failure(*failure), rank=failure[0])


def format_failure(rank: int, error: BaseException | str) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return f"{rank}|{text}"


def parse_failure(value: bytes | str) -> tuple[int, str]:
    text = value.decode() if isinstance(value, bytes) else value
    rank, _, message = text.partition("|")
    return int(rank), message


def failure_store(store: Any) -> Any:
    """The view of the rendezvous store the ranks and the launcher share for failure reports."""
    return dist.PrefixStore("statemachine", store)


def report_failure(store: Any, rank: int, error: BaseException | str) -> tuple[int, str]:
    """Record `rank`'s failure in `failure_store(...)` unless one is recorded already; return the first one."""
    return parse_failure(store.compare_set(FAILURE_KEY, "", format_failure(rank, error)))


def read_failure(store: Any) -> tuple[int, str] | None:
    """The first failure recorded in `failure_store(...)`, if any."""
    return parse_failure(store.get(FAILURE_KEY)) if store.check([FAILURE_KEY]) else None


class PeerWatch:
    """Polls the store for a peer's failure and checks launched children; one per process."""

    _active: PeerWatch | None = None

    def __init__(
        self,
        store: Any,  # a failure_store(...) view
        rank: int,
        dead_children: Callable[[], list[tuple[int, str]]] | None = None,
    ) -> None:
        self.store = store
        self.rank = rank
        self.dead_children = dead_children
        self.failure: tuple[int, str] | None = None
        self.armed = False  # set while a run is in progress and this rank has not failed itself
        self.handling: Callable[[], bool] = lambda: False  # whether the main thread already handles a failure
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"statemachine-peer-watch-{rank}", daemon=True)
        PeerWatch._active = self
        self._thread.start()

    @classmethod
    def describe_active(cls) -> str:
        watch = cls._active
        if watch is None or watch.failure is None:
            return "a peer rank failed"
        return describe_failure(*watch.failure)

    @classmethod
    def active_failure_rank(cls) -> int | None:
        watch = cls._active
        return None if watch is None or watch.failure is None else watch.failure[0]

    def report(self, rank: int, error: BaseException | str) -> tuple[int, str]:
        """Record `rank`'s failure unless a failure is already recorded; return the first one."""
        try:
            self.failure = report_failure(self.store, rank, error)
        except RuntimeError:  # torch's store errors (DistNetworkError: its host is gone); this rank's error stands
            if self.failure is None:
                self.failure = parse_failure(format_failure(rank, error))
        return self.failure

    def read(self) -> tuple[int, str] | None:
        """The first failure recorded by any rank, if any (a gone store counts as rank 0's failure)."""
        if self.failure is not None:
            return self.failure
        try:
            self.failure = read_failure(self.store)
        except RuntimeError as error:  # DistNetworkError: the store's host (rank 0 or the launcher) died
            self.failure = (0, f"the rendezvous store is unreachable ({type(error).__name__}: {error})")
        return self.failure

    def report_dead_children(self) -> None:
        """A child rank this process launched that died (killed, so it could not report itself) is the first
        failure, unless one is recorded already."""
        if self.dead_children is not None:
            for rank, reason in self.dead_children():
                self.report(rank, reason)

    def wait_for_report(self, seconds: float) -> None:
        """Wait up to `seconds` for any rank's failure report to appear."""
        deadline = time.monotonic() + seconds
        while self.read() is None and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS)

    def stop(self) -> None:
        """Stop polling and wait for the thread to leave the store (a poll returns within the store's timeout)."""
        self._stop.set()
        if PeerWatch._active is self:
            PeerWatch._active = None
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        while not self._stop.wait(_POLL_SECONDS):
            if self.failure is None:
                self.report_dead_children()
            failure = self.read()
            if failure is None or failure[0] == self.rank:
                continue
            if self.armed and not self.handling() and not self._main_is_blocked():
                self.armed = False
                _log.error("rank %d: stopping because rank %d failed: %s", self.rank, *failure)
                _raise_in_main(self._main)

    def _main_is_blocked(self) -> bool:
        frame = None if self._main is None else sys._current_frames().get(self._main)
        if frame is None:
            return True
        filename = frame.f_code.co_filename.replace("\\", "/")
        return filename.endswith(_BLOCKING_FILES)


def _raise_in_main(thread_id: int | None) -> None:
    if thread_id is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(PeerFailedError))
