"""A side channel between ranks, so that one rank's failure ends the run everywhere within seconds.

Collectives cannot carry the news: the ranks still running are blocked in one, or will be at the next. The
rendezvous store can. The first rank to fail writes its rank and error under one key (compare-and-set: the first
writer wins); a thread on every rank polls that key. A rank that learns of a peer's failure while its main thread
runs Python code gets `PeerFailedError` raised there. A rank blocked inside a collective is released by the failed
rank tearing down its process group, which makes the collective fail at once.

The same thread publishes, twice a second, whether its main thread waits in a collective and where the run is
(the machine's state, epoch, step). When a collective times out, the ranks that were not waiting in one (or
stopped publishing) are the ones that stalled: the error names them and their last state, and each stalled rank,
named in the store, prints its threads' stacks, writes them with its history dump and exits.
"""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

_log = logging.getLogger(__name__)

FAILURE_KEY = "first_failure"
STALLED_KEY = "stalled_ranks"
_POLL_SECONDS = 0.1
_PUBLISH_SECONDS = 0.5
_SILENT_SECONDS = 3.0  # a rank that published nothing for this long is stuck where even its watch cannot run
# Innermost frames of a main thread waiting for its peers: a collective, or autograd running one in backward. A
# collective the strategy started earlier is waited for from devices/parallel.py (its C++ wait shows no torch frame).
_WAITING_PARTS = (
    "/torch/distributed/",
    "/torch/autograd/",
    "/torch/_tensor.py",
    "/torch/nn/parallel/",
    "/devices/parallel.py",
)
# Frames from these files mean the main thread is inside a blocking collective or autograd: an exception raised
# there asynchronously would land in torch internals, and the failed peer's teardown already makes the call fail.
_BLOCKING_FILES = ("distributed_c10d.py", "autograd/__init__.py", "autograd/graph.py", "_tensor.py")


def describe_failure(rank: int, message: str) -> str:
    return f"rank {rank} failed first: {message}"


class StalledRankError(RuntimeError):
    """A collective timed out because other ranks never arrived; the message names them and where they were."""

    def __init__(self, message: str, ranks: list[int]) -> None:
        super().__init__(message)
        self.ranks = ranks


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
        world_size: int = 1,
    ) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.dead_children = dead_children
        self.where: Callable[[], str] = lambda: "outside a run"  # the machine's position, set for each run
        self.on_stalled: Callable[[str], None] = lambda stack: None  # writes the stack with the history dump
        self._published = 0.0
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

    # ---- stalled ranks ----------------------------------------------------------------------------------

    def stalled(self, timeout: timedelta | None) -> StalledRankError | None:
        """After a collective of this rank timed out: the peers that never arrived, as the error to raise (None
        when every peer was waiting too and none fell silent). Names them in the store, so they dump and exit."""
        peers = [rank for rank in range(self.world_size) if rank != self.rank]
        positions = {rank: self._position(rank) for rank in peers}
        late = [rank for rank, (waiting, _) in positions.items() if not waiting]
        if not late:
            return None
        try:
            self.store.compare_set(STALLED_KEY, "", ",".join(map(str, late)))
        except RuntimeError:
            pass  # the store's host is the stalled rank, gone: the message still names it
        limit = f"within {timeout}" if timeout is not None else "in time"
        described = "; ".join(f"rank {rank}: {positions[rank][1]}" for rank in late)
        who = "rank" if len(late) == 1 else "ranks"
        message = (
            f"{who} {', '.join(map(str, late))} did not reach the next agreement {limit} (the strategy's timeout); "
            f"last state: {described}. A stalled rank prints its threads' stacks and writes them next to its "
            "history dump"
        )
        return StalledRankError(message, late)

    def _position(self, rank: int) -> tuple[bool, str]:
        """(waiting in a collective, where its run was) as `rank` last published it."""
        try:
            published = self.store.get(f"progress/{rank}").decode() if self.store.check([f"progress/{rank}"]) else ""
        except RuntimeError:
            published = ""
        if not published:
            return False, "never reported its position"
        stamp, waiting, where = published.split("|", 2)
        if time.time() - float(stamp) > _SILENT_SECONDS:
            return False, f"{where} (then silent: stuck where no Python runs)"
        return waiting == "1", where

    def _publish(self) -> None:
        now = time.time()
        if now - self._published < _PUBLISH_SECONDS:
            return
        self._published = now
        waiting = "1" if self._main_is_waiting() else "0"
        try:
            self.store.set(f"progress/{self.rank}", f"{now}|{waiting}|{self.where()}")
        except RuntimeError:
            pass  # the store is gone: a failure is being handled

    def _named_stalled(self) -> bool:
        try:
            if not self.store.check([STALLED_KEY]):
                return False
            return str(self.rank) in self.store.get(STALLED_KEY).decode().split(",")
        except RuntimeError:
            return False

    def _dump_and_exit(self) -> None:
        """This rank is the one the others waited for: show where each thread is, keep the history, end."""
        _log.error("rank %d: the other ranks timed out waiting for this rank; its threads' stacks follow", self.rank)
        with tempfile.TemporaryFile("w+") as buffer:
            faulthandler.dump_traceback(file=buffer, all_threads=True)
            buffer.seek(0)
            stack = buffer.read()
        sys.stderr.write(f"rank {self.rank} stalled; the stacks of its threads:\n{stack}")
        sys.stderr.flush()
        try:
            self.on_stalled(stack)
        finally:
            os._exit(1)

    def _main_file(self) -> str | None:
        """The file of the main thread's innermost Python frame (None when it has none)."""
        frame = None if self._main is None else sys._current_frames().get(self._main)
        return None if frame is None else frame.f_code.co_filename.replace("\\", "/")

    def _main_is_waiting(self) -> bool:
        filename = self._main_file()
        return filename is not None and any(part in filename for part in _WAITING_PARTS)

    def _loop(self) -> None:
        while not self._stop.wait(_POLL_SECONDS):
            if self.armed:
                self._publish()
            if self.failure is None:
                self.report_dead_children()
            failure = self.read()
            if failure is None or failure[0] == self.rank:
                continue
            if self._named_stalled():
                self._dump_and_exit()
            if self.armed and not self.handling() and not self._main_is_blocked():
                self.armed = False
                _log.error("rank %d: stopping because rank %d failed: %s", self.rank, *failure)
                _raise_in_main(self._main)

    def _main_is_blocked(self) -> bool:
        filename = self._main_file()
        return filename is None or filename.endswith(_BLOCKING_FILES)


def _raise_in_main(thread_id: int | None) -> None:
    if thread_id is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(PeerFailedError))
