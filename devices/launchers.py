"""Launchers: how the processes of a DDP run start.

- `ScriptLauncher` (`strategy="ddp"`): this process becomes local rank 0 and starts the script again (same
  `sys.argv`) for the other local ranks, with their rank variables set; they join instead of launching.
- `MultiprocessingLauncher` (`ddp_spawn`, `ddp_fork`, `ddp_notebook`): the entry point runs in new processes; the
  main process waits and receives rank 0's results.
A process started by torchrun or SLURM gets no launcher: it is already one of the ranks.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import io
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from devices.environments import LAUNCHED_MARKER, LOOPBACK, ClusterEnvironment, find_free_port
from devices.watchdog import PeerWatch, describe_failure, failure_store, read_failure, report_failure

_log = logging.getLogger(__name__)

# After the first rank fails, the others get this long to run their interrupt path and exit before being killed.
EXIT_GRACE_SECONDS = 30.0
_PR_SET_PDEATHSIG = 1


class RankFailedError(RuntimeError):
    """A launched rank failed; the message names the rank that failed first and its original error."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(describe_failure(rank, message))
        self.rank = rank


class LaunchedStrategy(Protocol):
    """What a launcher needs of the strategy whose processes it starts."""

    start_method: str
    watch: PeerWatch | None

    @property
    def num_processes(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def global_rank(self) -> int: ...

    @property
    def node_rank(self) -> int: ...

    @property
    def cluster_environment(self) -> ClusterEnvironment | None: ...

    def global_rank_of(self, local_rank: int) -> int: ...

    def set_local_rank(self, local_rank: int) -> None: ...

    def setup_environment(self, store_host: tuple[str, int] | None = None) -> None:
        """Join the process group; `store_host`: the rendezvous store a launcher already serves."""
        ...


def make_launcher(strategy: LaunchedStrategy) -> ScriptLauncher | MultiprocessingLauncher:
    if strategy.start_method == "popen":
        return ScriptLauncher(strategy)
    if strategy.start_method not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"strategy start method {strategy.start_method!r} is not available on this platform; "
            f"available: {multiprocessing.get_all_start_methods()} (use strategy='ddp' or 'ddp_spawn')"
        )
    return MultiprocessingLauncher(strategy)


class ScriptLauncher:
    """Runs the entry point here as local rank 0 and the same script in a child per other local rank."""

    def __init__(self, strategy: LaunchedStrategy) -> None:
        self.strategy = strategy
        self.children: list[tuple[int, subprocess.Popen[bytes]]] = []

    def launch(self, function: Callable[..., Any], *args: Any) -> Any:
        strategy = self.strategy
        if not self.children and strategy.num_processes > 1:
            self._start_children()
        strategy.set_local_rank(0)
        strategy.setup_environment()
        try:
            return function(*args)
        except BaseException:
            self.wait_for_children(EXIT_GRACE_SECONDS)
            raise

    def _start_children(self) -> None:
        strategy = self.strategy
        env = strategy.cluster_environment
        assert env is not None
        port = env.main_port
        command = _script_command()
        node_rank = strategy.node_rank
        for local_rank in range(1, strategy.num_processes):
            global_rank = strategy.global_rank_of(local_rank)
            child_env = {
                **os.environ,
                LAUNCHED_MARKER: "1",
                "MASTER_ADDR": env.main_address,
                "MASTER_PORT": str(port),
                "NODE_RANK": str(node_rank),
                "LOCAL_RANK": str(local_rank),
                "WORLD_SIZE": str(strategy.world_size),
                "RANK": str(global_rank),
            }
            process = subprocess.Popen(command, env=child_env)  # this very script, relaunched
            self.children.append((global_rank, process))
        atexit.register(self.wait_for_children, EXIT_GRACE_SECONDS)

    def dead_children(self) -> list[tuple[int, str]]:
        """Children that exited with an error (polled by the peer watch)."""
        dead = []
        for rank, process in self.children:
            code = process.poll()
            if code not in (None, 0):
                dead.append((rank, _describe_exit(code)))
        return dead

    def wait_for_children(self, seconds: float) -> None:
        """Give the children `seconds` to finish on their own, then kill the rest."""
        deadline = time.monotonic() + seconds
        for _, process in self.children:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _log.error("rank process %d did not exit in time; killing it", process.pid)
                process.kill()
                process.wait()


class MultiprocessingLauncher:
    """torch.multiprocessing with `spawn`, `fork` or `forkserver`; rank 0's return value comes back here."""

    def __init__(self, strategy: LaunchedStrategy) -> None:
        self.strategy = strategy

    def launch(self, function: Callable[..., Any], *args: Any) -> Any:
        strategy = self.strategy
        # This process hosts the rendezvous store: it outlives every rank, so it can record a rank's death.
        port = find_free_port()
        store = dist.TCPStore(LOOPBACK, port, None, is_master=True, wait_for_workers=False)
        context = mp.get_context(strategy.start_method)
        queue = context.SimpleQueue()
        with _no_inherited_garbage(strategy.start_method == "fork"):
            processes = mp.start_processes(
                _worker,
                args=(strategy, (LOOPBACK, port), function, args, queue),
                nprocs=strategy.num_processes,
                start_method=strategy.start_method,
                join=False,
            ).processes
        with _forwarding_sigterm(processes):
            return self._collect(processes, queue, failure_store(store))

    def _collect(self, processes: list[Any], queue: Any, store: Any) -> Any:
        """Wait for every process, reading what they send as it arrives (a large result would otherwise fill
        the pipe and block its sender); after the first failure the others get a grace period, then are killed."""
        ranks = {process.sentinel: index for index, process in enumerate(processes)}
        pending = set(ranks)
        messages: list[tuple[str, Any]] = []
        deadline: float | None = None
        killed_first: tuple[int, str] | None = None
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait([*pending, queue._reader], timeout=timeout)
            if not ready:
                break
            while not queue.empty():
                messages.append(queue.get())
            for sentinel in ready:
                if sentinel not in pending:
                    continue
                pending.discard(sentinel)
                process = processes[ranks[sentinel]]
                process.join()
                if process.exitcode == 0 or deadline is not None:
                    continue
                deadline = time.monotonic() + EXIT_GRACE_SECONDS
                if process.exitcode < 0:
                    # Killed by a signal, it could not report itself: record it so the other ranks stop.
                    killed_first = (self.strategy.global_rank_of(ranks[sentinel]), _describe_exit(process.exitcode))
                    report_failure(store, *killed_first)
        for sentinel in pending:
            process = processes[ranks[sentinel]]
            _log.error("rank process %d did not exit in time; killing it", process.pid)
            process.kill()
            process.join()
        while not queue.empty():
            messages.append(queue.get())
        returned = [payload for kind, payload in messages if kind == "result"]
        if all(process.exitcode == 0 for process in processes) and returned:
            return torch.load(io.BytesIO(returned[0]), weights_only=False)
        first = _read_failure(store) or killed_first
        if first is None:
            errors = [payload for kind, payload in messages if kind == "error"]
            first = errors[0] if errors else (0, "a rank process exited without reporting a result")
        raise RankFailedError(*first)


@contextlib.contextmanager
def _forwarding_sigterm(processes: list[Any]) -> Iterator[None]:
    """While the ranks run, a SIGTERM to this launching process (a preempted job) goes to every rank, which stop
    together at one batch and can save a checkpoint; this process then reports how they ended."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: Any) -> None:
        _log.info("received SIGTERM: passing it on to the rank processes")
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _no_inherited_garbage(forking: bool) -> Iterator[None]:
    """A forked rank must never collect garbage it inherited: the destructor of, say, a finished run's rendezvous
    store joins a thread that exists only in this process, and the rank would hang. So this process collects its
    garbage first, and what the ranks inherit is frozen (never examined by their collector)."""
    if not forking:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _worker(
    local_rank: int,
    strategy: LaunchedStrategy,
    store_host: tuple[str, int],
    function: Callable[..., Any],
    args: tuple,
    queue: Any,
) -> None:
    _stop_with_parent()
    if strategy.start_method == "fork":
        # A forked child inherits the parent's OpenMP pool in a broken state: its first parallel region hangs
        # if the parent computed anything before. One intra-op thread per rank never enters such a region.
        torch.set_num_threads(1)
    strategy.set_local_rank(local_rank)
    try:
        strategy.setup_environment(store_host)
        result = function(*args)
    except BaseException as error:
        queue.put(("error", (strategy.global_rank, f"{type(error).__name__}: {error}")))
        # The traceback is printed by torch.multiprocessing's wrapper; the exit code tells the main process.
        raise
    if strategy.global_rank == 0:
        # As plain bytes: torch would share tensors through file descriptors that die with this process.
        buffer = io.BytesIO()
        torch.save(result, buffer)
        queue.put(("result", buffer.getvalue()))
    if strategy.watch is not None:
        strategy.watch.stop()


def _stop_with_parent() -> None:
    """A rank whose launching process died gets SIGTERM (the trainer stops at the next batch boundary) instead
    of training on as an orphan. Linux only; elsewhere the launcher's exit handling is all there is."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _read_failure(store: Any) -> tuple[int, str] | None:
    try:
        return read_failure(store)
    except RuntimeError:  # torch's store errors: the launcher hosts the store, so only a broken store lands here
        return None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process was killed by {name}"
    return f"the process exited with code {code}"


def _script_command() -> list[str]:
    """The command that started this process, so children run the same program with the same arguments."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name not in ("__main__", None):
        return [sys.executable, "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    script = sys.argv[0]
    if not script or script == "-c" or not os.path.exists(script):
        raise RuntimeError(
            "strategy='ddp' starts this program again for the other ranks, but it was not started from a script "
            f"file (sys.argv[0]={script!r}); run it as a script, or use strategy='ddp_spawn' or 'ddp_fork'"
        )
    return [sys.executable, os.path.abspath(script), *sys.argv[1:]]
