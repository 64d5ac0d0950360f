"""Cluster environments: where this process sits in a multi-process run, read from what launched it.

Three launchers are recognised: our own (plain local runs, and the children the `ddp` launcher starts), torchrun
(torch elastic's variables) and SLURM. Multi-node wiring is theirs; this module only reads their variables.
"""

from __future__ import annotations

import os
import re
import signal
import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping

LOOPBACK = "127.0.0.1"
# Set by the `ddp` launcher in the children it starts, so they join instead of launching again.
LAUNCHED_MARKER = "STATEMACHINE_LAUNCHED"


class ClusterEnvironment(ABC):
    """Ranks and the rendezvous address of this process."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env

    @property
    def env(self) -> Mapping[str, str]:
        """The variables read: the live process environment unless a mapping was given (os.environ is not
        kept on the instance, so environments pickle into spawned processes)."""
        return os.environ if self._env is None else self._env

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether something outside the trainer started every process (then the trainer launches none)."""

    @property
    @abstractmethod
    def main_address(self) -> str: ...

    @property
    @abstractmethod
    def main_port(self) -> int: ...

    @abstractmethod
    def world_size(self) -> int: ...

    @abstractmethod
    def global_rank(self) -> int: ...

    @abstractmethod
    def local_rank(self) -> int: ...

    @abstractmethod
    def node_rank(self) -> int: ...

    def processes_per_node(self) -> int | None:
        """How many processes the launcher started on each node, when it says (what `devices="auto"` means
        there); None when it does not."""
        return None

    def _int(self, name: str) -> int:
        value = self.env.get(name)
        if value is None or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"environment variable {name}={value!r} must be an integer for {type(self).__name__}")
        return int(value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LightningEnvironment(ClusterEnvironment):
    """A plain local run, or a child started by the `ddp` launcher (which sets the rank variables).

    Rendezvous is on the loopback interface; the port comes from MASTER_PORT, or a free one is found once.
    """

    def __init__(self, env: Mapping[str, str] | None = None, world_size: int = 1) -> None:
        super().__init__(env)
        self._world_size = world_size
        self._global_rank = 0
        self._port: int | None = None

    @property
    def creates_processes_externally(self) -> bool:
        return LAUNCHED_MARKER in self.env

    @property
    def main_address(self) -> str:
        return self.env.get("MASTER_ADDR", LOOPBACK)

    @property
    def main_port(self) -> int:
        if "MASTER_PORT" in self.env:
            return self._int("MASTER_PORT")
        if self._port is None:
            self._port = find_free_port()
        return self._port

    def world_size(self) -> int:
        return self._int("WORLD_SIZE") if "WORLD_SIZE" in self.env else self._world_size

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        return self._int("RANK") if "RANK" in self.env else self._global_rank

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank

    def local_rank(self) -> int:
        return self._int("LOCAL_RANK") if "LOCAL_RANK" in self.env else 0

    def node_rank(self) -> int:
        for name in ("NODE_RANK", "GROUP_RANK"):
            if name in self.env:
                return self._int(name)
        return 0


class TorchElasticEnvironment(ClusterEnvironment):
    """Processes started by torchrun (torch.distributed.elastic): it sets every rank variable."""

    @staticmethod
    def detect(env: Mapping[str, str] | None = None) -> bool:
        env = os.environ if env is None else env
        return all(name in env for name in ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return self.env["MASTER_ADDR"]

    @property
    def main_port(self) -> int:
        return self._int("MASTER_PORT")

    def world_size(self) -> int:
        return self._int("WORLD_SIZE")

    def global_rank(self) -> int:
        return self._int("RANK")

    def local_rank(self) -> int:
        return self._int("LOCAL_RANK")

    def node_rank(self) -> int:
        return self._int("GROUP_RANK")

    def processes_per_node(self) -> int | None:
        return self._int("LOCAL_WORLD_SIZE")


class SLURMEnvironment(ClusterEnvironment):
    """Tasks started by SLURM (`srun`): ranks from SLURM's variables, the first node of the job as the address.

    With `auto_requeue` (the default), `requeue_signal` (SIGUSR1; send it with `#SBATCH --signal=SIGUSR1@90`)
    saves `hpc_ckpt_<n>.ckpt` and requeues the job; `ckpt_path="hpc"` resumes from the newest one.
    """

    def __init__(
        self,
        auto_requeue: bool = True,
        requeue_signal: signal.Signals | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(env)
        if requeue_signal is not None and not isinstance(requeue_signal, int):
            raise ValueError(f"requeue_signal={requeue_signal!r} must be a signal.Signals value such as SIGUSR1")
        self.auto_requeue = auto_requeue
        self.requeue_signal = signal.SIGUSR1 if requeue_signal is None else signal.Signals(requeue_signal)

    @staticmethod
    def detect(env: Mapping[str, str] | None = None) -> bool:
        env = os.environ if env is None else env
        # An interactive allocation (salloc, then python) has SLURM variables but one task that SLURM did not
        # start for us; Lightning treats job names 'bash' and 'interactive' that way.
        return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def job_id(self) -> str:
        job = self.env.get("SLURM_ARRAY_JOB_ID")
        if job is not None:
            return f"{job}_{self.env.get('SLURM_ARRAY_TASK_ID', '0')}"
        return self.env["SLURM_JOB_ID"]

    @property
    def main_address(self) -> str:
        if "MASTER_ADDR" in self.env:
            return self.env["MASTER_ADDR"]
        nodes = self.env.get("SLURM_NODELIST") or self.env.get("SLURM_JOB_NODELIST")
        if not nodes:
            raise ValueError("SLURM_NODELIST is not set: cannot tell which node hosts rank 0")
        return first_hostname(nodes)

    @property
    def main_port(self) -> int:
        if "MASTER_PORT" in self.env:
            return self._int("MASTER_PORT")
        # Every task of a job must agree without talking: derive the port from the job id's last four digits.
        digits = re.sub(r"\D", "", self.env["SLURM_JOB_ID"])[-4:] or "0"
        return 15000 + int(digits)

    def world_size(self) -> int:
        return self._int("SLURM_NTASKS")

    def global_rank(self) -> int:
        return self._int("SLURM_PROCID")

    def local_rank(self) -> int:
        return self._int("SLURM_LOCALID")

    def node_rank(self) -> int:
        return self._int("SLURM_NODEID")

    def processes_per_node(self) -> int | None:
        # e.g. "4" or "4(x2)" (four tasks on each of two nodes); heterogeneous jobs list several, unset otherwise
        per_node = self.env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
        return int(per_node) if per_node.isdigit() else None


def first_hostname(nodelist: str) -> str:
    """The first host of a SLURM node list such as 'gpu[003-005,010],cpu1' -> 'gpu003'."""
    first = re.match(r"([^,\[]+)(\[([^\]]*)\])?", nodelist.strip())
    if first is None:
        raise ValueError(f"SLURM node list {nodelist!r} is not in SLURM's 'name[range,...],...' form")
    prefix, _, ranges = first.groups()
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


_GROUPS_MADE_BY_TRAINERS: list[object] = []


def made_by_trainer(group: object) -> None:
    """A strategy made `group` (the default process group) for its run."""
    _GROUPS_MADE_BY_TRAINERS.append(group)


class ProcessGroupEnvironment(ClusterEnvironment):
    """A process group made before the Trainer (Ray Train's workers, a custom launcher, a notebook that called
    `init_process_group`): ranks and world size are the group's, and the trainer joins it instead of making one.

    The group has no rendezvous left to do, so the address is only what the environment says. Ranks per node come
    from LOCAL_WORLD_SIZE where the launcher sets it; without it, every rank is taken to be on one node."""

    @staticmethod
    def detect() -> bool:
        """Whether a process group exists that no trainer of this process made (a run's own group outlives it,
        and a later Trainer(devices=1) on rank 0 must not join it)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return False
        world = dist.group.WORLD
        return not any(group is world for group in _GROUPS_MADE_BY_TRAINERS)

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return self.env.get("MASTER_ADDR", LOOPBACK)

    @property
    def main_port(self) -> int:
        return self._int("MASTER_PORT") if "MASTER_PORT" in self.env else 0

    def world_size(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size()

    def global_rank(self) -> int:
        import torch.distributed as dist

        return dist.get_rank()

    def processes_per_node(self) -> int:
        return self._int("LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in self.env else self.world_size()

    def local_rank(self) -> int:
        return self._int("LOCAL_RANK") if "LOCAL_RANK" in self.env else self.global_rank() % self.processes_per_node()

    def node_rank(self) -> int:
        return self.global_rank() // self.processes_per_node()


def detect(env: Mapping[str, str] | None = None) -> ClusterEnvironment:
    """The environment that launched this process: a process group that already exists, torchrun, then SLURM,
    else a local run."""
    if env is None and ProcessGroupEnvironment.detect():
        return ProcessGroupEnvironment()
    if TorchElasticEnvironment.detect(env):
        return TorchElasticEnvironment(env)
    if SLURMEnvironment.detect(env):
        return SLURMEnvironment(env=env)
    return LightningEnvironment(env)


def find_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])
