"""The process group every multi-process strategy shares: one process per device on torch.distributed (gloo on
CPU, NCCL on CUDA). How the processes start is the launcher's job (`devices.launchers`); where this process sits
is the cluster environment's (`devices.environments`)."""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from devices.accelerators import Accelerator
from devices.checkpoint_plugin import CheckpointIO
from devices.environments import ClusterEnvironment, LightningEnvironment, made_by_trainer
from devices.precision import Precision
from devices.strategy import ModuleT, Strategy, _check_reduce_op
from devices.transfer import copy_to_host
from devices.watchdog import PeerFailedError, PeerWatch, StalledRankError, failure_store

_log = logging.getLogger(__name__)

# What `start_any` returns: called once the batch the flags rode is done, it returns the call that reads them.
FlagsInFlight = Callable[[], Callable[[], list[bool]]]

DEFAULT_TIMEOUT = timedelta(minutes=30)
RENDEZVOUS_TIMEOUT = timedelta(minutes=5)
_PEER_REPORT_SECONDS = 2.0
_CHILDREN_GRACE_SECONDS = 15.0  # a stalled launching rank waits this long for the ranks it started to end
_START_METHODS = ("popen", "spawn", "fork", "forkserver")
_OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}


class ParallelStrategy(Strategy):
    """One process per device in one torch.distributed process group: where each process sits, the collectives,
    and how one rank's failure reaches the others. `timeout` bounds every collective. Subclasses decide how the
    module is split or replicated across the group."""

    is_distributed = True

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = DEFAULT_TIMEOUT,
        start_method: str = "popen",
        num_nodes: int = 1,
        checkpoint_io: CheckpointIO | None = None,
    ) -> None:
        if start_method not in _START_METHODS:
            raise ValueError(f"start_method={start_method!r} is not valid; use one of {list(_START_METHODS)}")
        if timeout is not None and not isinstance(timeout, timedelta):
            raise ValueError(f"timeout={timeout!r} must be a datetime.timedelta")
        for name, value in (
            ("accelerator", accelerator),
            ("parallel_devices", parallel_devices),
            ("precision", precision),
        ):
            if value is not None:
                raise ValueError(
                    f"{type(self).__name__}({name}=...) is not supported: the Trainer's accelerator=, devices= and "
                    "precision= flags set them"
                )
        # Placeholders: the connector's finish_setup sets both once the Trainer's flags are resolved.
        super().__init__(None, None, checkpoint_io)  # type: ignore[arg-type]
        self.parallel_devices: list[torch.device] | None = None
        self.cluster_environment = cluster_environment
        self.process_group_backend = process_group_backend
        self.timeout = timeout
        self.start_method = start_method
        self.num_nodes = num_nodes
        self.watch: PeerWatch | None = None
        self._local_rank: int | None = None
        self._store: Any = None
        # the process group existed before this strategy joined it: its owner destroys it, never this strategy
        self._adopted = False
        self._broken = False
        # set when a collective timed out because other ranks never arrived: the error that names them
        self.stall: StalledRankError | None = None
        self.sync_batchnorm = False

    def finish_setup(self, accelerator: Accelerator, devices: list[torch.device], precision: Precision) -> None:
        """Called by the connector once the accelerator, devices and precision are known."""
        self.accelerator = accelerator
        self.parallel_devices = devices
        self.precision = precision
        assert self.cluster_environment is not None, "connect() gives the strategy its cluster environment first"
        if isinstance(self.cluster_environment, LightningEnvironment):
            self.cluster_environment.set_world_size(self.world_size)
        from devices import launchers

        if not self.cluster_environment.creates_processes_externally:
            self.launcher = launchers.make_launcher(self)

    # ---- where this process sits ------------------------------------------------------------------------

    @property
    def num_processes(self) -> int:
        return len(self.parallel_devices or [])

    @property
    def num_devices(self) -> int:
        return self.num_processes

    @property
    def local_rank(self) -> int:
        if self._local_rank is not None:
            return self._local_rank
        return self.cluster_environment.local_rank() if self.cluster_environment is not None else 0

    def set_local_rank(self, rank: int) -> None:
        """A launcher tells each process it starts which local rank it is."""
        self._local_rank = rank

    @property
    def node_rank(self) -> int:
        return self.cluster_environment.node_rank() if self.cluster_environment is not None else 0

    @property
    def global_rank(self) -> int:
        env = self.cluster_environment
        if env is not None and env.creates_processes_externally:
            return env.global_rank()
        return self.global_rank_of(self.local_rank)

    def global_rank_of(self, local_rank: int) -> int:
        """The global rank of this node's process `local_rank`."""
        return self.node_rank * self.num_processes + local_rank

    @property
    def world_size(self) -> int:
        return self.num_processes * self.num_nodes

    @property
    def root_device(self) -> torch.device:
        devices = self.parallel_devices or []
        return devices[self.local_rank % len(devices)] if devices else torch.device("cpu")

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """How the data is split: each rank reads its own part."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @property
    def backend(self) -> str:
        if self.process_group_backend is not None:
            return self.process_group_backend
        return "nccl" if self.root_device.type == "cuda" else "gloo"

    @property
    def distributed_ready(self) -> bool:
        return dist.is_available() and dist.is_initialized() and not self._broken

    # ---- process group ----------------------------------------------------------------------------------

    def setup_environment(self, store_host: tuple[str, int] | None = None) -> None:
        """Join the process group; `store_host`: the rendezvous store a launcher already serves (else the cluster
        environment's address, where rank 0 serves it or torchrun's agent does)."""
        super().setup_environment()
        if dist.is_initialized():
            # A group the user made (or an earlier run joined): joined as it is, and left for its owner to destroy.
            self._check_existing_group()
            self._adopted = self._store is None
            return
        self._check_world(self.cluster_environment)
        env = self.cluster_environment
        rank, size = self.global_rank, self.world_size
        host, port = store_host or (env.main_address, env.main_port)
        # torchrun's agent already serves a store at that address; every rank joins it as a client.
        hosted_elsewhere = store_host is not None or env.creates_processes_externally and _agent_store(env)
        timeout = self.timeout or DEFAULT_TIMEOUT
        # Starting the processes is no collective: a short collective timeout must not fail a slow start.
        waiting = max(timeout, RENDEZVOUS_TIMEOUT)
        self._store = dist.TCPStore(host, port, size, is_master=rank == 0 and not hosted_elsewhere, timeout=waiting)
        _log.info(f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/{size}")  # Lightning's lines
        _log.debug("rank %d joins the %s process group at %s:%d", rank, self.backend, host, port)
        dist.init_process_group(self.backend, store=self._store, rank=rank, world_size=size, timeout=timeout)
        if rank == 0:
            rule = "-" * 100
            _log.info(
                f"{rule}\ndistributed_backend={self.backend}\n"
                f"All distributed processes registered. Starting with {size} processes\n{rule}\n"
            )
        made_by_trainer(dist.group.WORLD)
        atexit.register(self._leave)
        children = getattr(self.launcher, "dead_children", None)
        self.watch = PeerWatch(failure_store(self._store), rank, children, world_size=size)

    def _check_world(self, env: ClusterEnvironment) -> None:
        if env.creates_processes_externally and env.world_size() != self.world_size:
            raise ValueError(
                f"{type(env).__name__} started {env.world_size()} processes, but the Trainer asks for "
                f"devices={self.num_processes} x num_nodes={self.num_nodes} = {self.world_size}; make them agree"
            )

    def _check_existing_group(self) -> None:
        if dist.get_world_size() != self.world_size or dist.get_rank() != self.global_rank:
            raise RuntimeError(
                f"a process group with world size {dist.get_world_size()} (rank {dist.get_rank()}) already exists, "
                f"but this strategy needs world size {self.world_size} (rank {self.global_rank})"
            )

    def _leave(self) -> None:
        """At exit: stop watching the peers first (its thread must not be inside a store call while the store and
        the process group go away: the C++ side would abort the process), then leave the process group."""
        if self.watch is not None:
            self.watch.stop()
        _destroy_group()

    def arm(
        self,
        handling: Callable[[], bool],
        where: Callable[[], str] = lambda: "in a run",
        on_stalled: Callable[[str], None] = lambda stack: None,
    ) -> None:
        """A run starts: a peer's failure from now on interrupts this process (unless `handling()` says it is
        already handling a failure of its own). `where()` describes the run's position to the peers;
        `on_stalled(stack)` keeps the history and this rank's stacks if the peers time out waiting for it."""
        if self.watch is not None:
            self.watch.handling = handling
            self.watch.where = where
            self.watch.on_stalled = lambda stack: self._stalled(on_stalled, stack)
            self.watch.armed = True

    def _stalled(self, on_stalled: Callable[[str], None], stack: str) -> None:
        """This rank is about to end because its peers timed out waiting for it: keep its record, and let the
        ranks it launched finish before it goes (none may outlive the run)."""
        try:
            on_stalled(stack)
        finally:
            wait = getattr(self.launcher, "wait_for_children", None)
            if wait is not None:
                wait(_CHILDREN_GRACE_SECONDS)

    def disarm(self) -> None:
        if self.watch is not None:
            self.watch.armed = False

    def peer_failure(self) -> tuple[int, str] | None:
        """The run's first failure when another rank had it: this rank only stopped because of it."""
        failure = None if self.watch is None else self.watch.read()
        return failure if failure is not None and failure[0] != self.global_rank else None

    # ---- the module -------------------------------------------------------------------------------------

    def setup_module(self, module: ModuleT) -> ModuleT:
        module = super().setup_module(module)
        if self.sync_batchnorm:
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
        return module

    # ---- collectives ------------------------------------------------------------------------------------

    def barrier(self, name: str | None = None) -> None:
        if not self.distributed_ready:
            return
        self._collective(dist.barrier, name or "barrier")

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not 0 <= src < self.world_size:
            raise ValueError(f"broadcast src={src!r} does not exist: ranks are 0 to {self.world_size - 1}")
        if not self.distributed_ready:
            return obj
        holder = [obj]
        self._collective(lambda: dist.broadcast_object_list(holder, src=src), "broadcast")
        return holder[0]

    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        _check_reduce_op(reduce_op)
        if not isinstance(tensor, Tensor) or not self.distributed_ready:
            return tensor
        name = reduce_op.lower() if isinstance(reduce_op, str) else None
        op = _OPS.get(name, dist.ReduceOp.SUM) if name is not None else reduce_op
        result = tensor.detach().clone()
        if result.device != self.root_device and self.backend == "nccl":
            result = result.to(self.root_device)
        if not result.is_floating_point() and name in ("mean", "avg"):
            result = result.float()
        self._collective(lambda: dist.all_reduce(result, op=op, group=group), "reduce")
        if name in ("mean", "avg"):
            result = result / (dist.get_world_size(group) if group is not None else self.world_size)
        return result.to(tensor.device)

    def start_reduce(self, tensor: Tensor, reduce_op: str) -> Callable[[], Tensor]:
        """All-reduce `tensor` in place with "sum", "product", "min" or "max" without waiting: this rank goes on
        while the ranks combine it. The call returned waits for it and gives `tensor`, reduced; a peer's failure
        surfaces from it as from `reduce`."""
        op = _OPS[reduce_op]
        work = self._collective(lambda: dist.all_reduce(tensor, op=op, async_op=True), "reduce")

        def wait() -> Tensor:
            self._collective(work.wait, "reduce")
            return tensor

        return wait

    @property
    def flags_read_behind(self) -> bool:
        """Whether a loop reads the flags agreed over a batch after the next batch instead of this one: on a
        device, reading them at once would make the host wait for the device at every batch."""
        return self.root_device.type != "cpu"

    def start_any(self, flags: Sequence[bool]) -> FlagsInFlight:
        """Start agreeing `flags` without waiting. Once the batch they ride is done, the call returned returns the
        one that reads them: each flag, True where any rank raised it (on a device their copy to the host is
        started, and reading waits for it alone, see `copy_to_host`). Here one small all-reduce of their own; a
        strategy may carry them in a collective it runs anyway."""
        wait = self.start_reduce(torch.tensor(flags, dtype=torch.float32, device=self.root_device), "max")

        def settle() -> Callable[[], list[bool]]:
            read = copy_to_host(wait())
            return lambda: [value != 0 for value in read()]

        return settle

    def all_gather(self, tensor: Tensor, group: Any | None = None, sync_grads: bool = False) -> Tensor:
        """Stack every rank's `tensor` along a new first dimension (sizes may differ along dim 0: padded and cut)."""
        if not self.distributed_ready:
            return tensor
        size = dist.get_world_size(group) if group is not None else self.world_size
        if sync_grads:
            from torch.distributed.nn.functional import all_gather as gather_with_grads

            return torch.stack(gather_with_grads(tensor.contiguous(), group=group or dist.group.WORLD))
        local = tensor.contiguous()
        gathered = [torch.empty_like(local) for _ in range(size)]
        self._collective(lambda: dist.all_gather(gathered, local, group=group), "all_gather")
        return torch.stack(gathered)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Every rank gets the same answer: whether all ranks (`all=True`) or any rank decided True."""
        if not self.distributed_ready:
            return bool(decision)
        votes = self.reduce(torch.tensor(int(bool(decision)), device=self.root_device), reduce_op="sum")
        count = int(votes.item())
        return count == self.world_size if all else count > 0

    def _collective(self, call: Callable[[], Any], name: str) -> Any:
        try:
            return call()
        except RuntimeError as error:
            failure = self.peer_failure()
            if failure is not None:
                raise PeerFailedError.of(failure) from error
            stall = self._stall_behind(error)
            if stall is not None:
                raise stall from error
            raise

    def _stall_behind(self, error: BaseException) -> StalledRankError | None:
        """When `error` is a collective's timeout: the error that names the ranks that never arrived."""
        if self.stall is None and self.watch is not None and _timed_out(error):
            self.stall = self.watch.stalled(self.timeout)
        return self.stall

    # ---- failure ----------------------------------------------------------------------------------------

    def on_failure(self, exception: BaseException) -> None:
        """Tell the peers (the first failure reported wins), then tear the process group down so their
        collectives fail now instead of after `timeout`; from here on this process's collectives are local."""
        self.disarm()
        if self._broken or not dist.is_initialized():
            return
        self._broken = True
        if self._adopted:
            # Not ours to destroy: the peers learn of this failure from their collectives' timeout, as they would
            # without the trainer.
            return
        if self.watch is not None and not isinstance(exception, PeerFailedError):
            # A collective fails here the moment a child rank dies; its death, not this error, came first.
            self.watch.report_dead_children()
            if _lost_a_peer(exception):
                # The peer that vanished (or the launcher that saw it die) reports it; give it a moment first.
                self.watch.wait_for_report(_PEER_REPORT_SECONDS)
            stall = None if isinstance(exception, StalledRankError) else self._stall_behind(exception)
            self.watch.report(self.global_rank, stall or exception)
        _destroy_group()

    def on_exception(self, exception: BaseException) -> None:
        """Everything was released by `on_failure`, which runs first on the interrupt path."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.distributed_ready:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        self._collective(lambda: dist.all_gather_object(gathered, obj), "all_gather_object")
        return gathered

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(start_method={self.start_method!r}, devices={self.num_processes}, "
            f"num_nodes={self.num_nodes}, precision={getattr(self.precision, 'name', None)!r})"
        )


def _lost_a_peer(exception: BaseException) -> bool:
    """gloo's and NCCL's wording when a collective fails because another process went away."""
    return isinstance(exception, RuntimeError) and "by peer" in str(exception)


def _timed_out(error: BaseException) -> bool:
    """gloo's and NCCL's wording when a collective waited past the process group's timeout."""
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("timed out" in text or "timeout" in text)


def _agent_store(env: ClusterEnvironment) -> bool:
    return env.env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def _destroy_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
