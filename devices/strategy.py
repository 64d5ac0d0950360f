"""Strategies: where the model lives, how its steps run, and how processes agree (one process for now)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from devices import sharded
from devices.accelerators import Accelerator
from devices.checkpoint_io import PathLike
from devices.checkpoint_plugin import DEFAULT_CHECKPOINT_IO, CheckpointIO
from devices.empty_init import EmptyInit
from devices.precision import Precision, StepClosure
from devices.transfer import move_optimizer_state, move_to_device

ModuleT = TypeVar("ModuleT", bound=nn.Module)

_REDUCE_OPS = ("mean", "avg", "sum", "product", "min", "max")
_CPU = torch.device("cpu")


class Strategy(ABC):
    """What every strategy offers the trainer; subclasses decide the process layout."""

    # Whether the run spans several processes that split the data (then loaders get distributed samplers).
    is_distributed: bool = False
    launcher: Any = None
    cluster_environment: Any = None  # the ClusterEnvironment this process runs under

    def __init__(
        self, accelerator: Accelerator, precision: Precision, checkpoint_io: CheckpointIO | None = None
    ) -> None:
        self.accelerator = accelerator
        self.precision = precision
        self._checkpoint_io: CheckpointIO = DEFAULT_CHECKPOINT_IO
        if checkpoint_io is not None:
            self.checkpoint_io = checkpoint_io
        self._lightning_module: Any = None
        self.model: Any = None  # the module the steps run on: the LightningModule, or a strategy's wrapper of it

    def connect(self, model: Any) -> None:
        """The Trainer connects the module each call runs (Lightning's call): `lightning_module` is that module, and
        `model` too until `setup_module` wraps it."""
        self._lightning_module = model
        self.model = model

    @property
    def lightning_module(self) -> Any:
        return self._lightning_module

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """What every checkpoint save, load and removal of the run goes through (`DEFAULT_CHECKPOINT_IO` unless one
        was given)."""
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, plugin: CheckpointIO) -> None:
        if not isinstance(plugin, CheckpointIO):
            raise ValueError(
                f"checkpoint_io={plugin!r} is not a CheckpointIO; give an instance of a CheckpointIO subclass "
                "such as TorchCheckpointIO"
            )
        self._checkpoint_io = plugin

    @property
    def plain_steps(self) -> bool:
        """Backward and the optimizer step are exactly `loss_for_backward(loss).backward()` and `optimizer.step()`
        (no scaling, no autocast, no wrapper), so a loop may call them directly."""
        return False

    def loss_for_backward(self, loss: Tensor) -> Tensor:
        """What the trainer's backward runs on, after the backward hooks saw `loss`: `loss` itself; a strategy may
        attach what its backward should carry (see `DDPStrategy.start_any`)."""
        return loss

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process trains on."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """How many processes take part in the run."""

    @property
    @abstractmethod
    def global_rank(self) -> int:
        """This process's index among all processes."""

    @property
    @abstractmethod
    def local_rank(self) -> int:
        """This process's index on its node."""

    @property
    @abstractmethod
    def node_rank(self) -> int:
        """This node's index."""

    @property
    @abstractmethod
    def num_devices(self) -> int:
        """How many devices each node uses."""

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """How the data is split across the ranks: `num_replicas` parts, this process reading part `rank`."""
        return {"num_replicas": 1, "rank": 0}

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @abstractmethod
    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this point."""

    @abstractmethod
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Return `src`'s `obj` on every process."""

    @abstractmethod
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        """Combine `tensor` across processes with `reduce_op`."""

    @abstractmethod
    def all_gather(self, tensor: Tensor, group: Any | None = None, sync_grads: bool = False) -> Tensor:
        """Collect `tensor` from every process."""

    @abstractmethod
    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Agree on a stop/save decision: every process (`all`) or any process must want it."""

    def check_same(self, value: str) -> list[str] | None:
        """Every process's `value` (index = global rank) when they differ; None when all hold the same one."""
        values = self.all_gather_object(value)
        return values if len(set(values)) > 1 else None

    def setup_environment(self) -> None:
        """Prepare the device for this process; call once before the module moves."""
        self.accelerator.setup_device(self.root_device)

    def setup_module(self, module: ModuleT) -> ModuleT:
        converted = self.precision.convert_module(module)
        return self.model_to_device(converted)

    def route_steps(self, module: nn.Module, names: Iterable[str]) -> None:
        """After `setup_module`: a strategy that must see each of these step methods as a forward of the module
        (to gather sharded parameters around it) wraps them here; the others run the methods as they are."""
        return None

    def model_to_device(self, module: ModuleT) -> ModuleT:
        return module.to(self.root_device)

    def batch_to_device(self, batch: Any, device: torch.device | None = None) -> Any:
        """The default behind `LightningModule.transfer_batch_to_device`."""
        return move_to_device(batch, self.root_device if device is None else device)

    def optimizers_to_device(self, optimizers: Iterable[Optimizer], device: torch.device | None = None) -> None:
        target = self.root_device if device is None else device
        for optimizer in optimizers:
            move_optimizer_state(optimizer, target)

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        self.precision.backward(loss, *args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, closure: StepClosure, **kwargs: Any) -> Any:
        return self.precision.optimizer_step(optimizer, closure, **kwargs)

    @contextmanager
    def tensor_init_context(self, empty_init: bool | None = None) -> Iterator[None]:
        """Tensors created inside are born on this process's device, in the precision's dtype.

        `empty_init=True` also skips the `torch.nn.init` calls (for weights a checkpoint will replace).
        """
        with EmptyInit(enabled=bool(empty_init)), self.root_device, self.precision.tensor_init_context():
            yield

    def teardown(self, module: nn.Module | None = None, optimizers: Iterable[Optimizer] = ()) -> None:
        """Leave the module and optimizer state on the CPU (on_fit_end sees them there); free the device."""
        self.optimizers_to_device(optimizers, _CPU)
        if module is not None:
            module.to(_CPU)
        self.accelerator.teardown()
        self.checkpoint_io.teardown()

    # ---- state dicts: what a checkpoint holds of the module and the optimizers ----------------------------

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The module's weights as a checkpoint stores them (every rank calls it: a sharded strategy gathers)."""
        return module.state_dict()

    def gathered_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The whole weights on rank 0 (every rank calls it), for handing them to another process."""
        return module.state_dict()

    def optimizer_state_dict(self, module: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_module_state_dict(self, module: nn.Module, state: dict[str, Any], strict: bool = True) -> None:
        module.load_state_dict(state, strict=strict)

    def load_optimizer_state_dict(self, module: nn.Module, optimizer: Optimizer, state: dict[str, Any]) -> None:
        optimizer.load_state_dict(indexed_optimizer_state(state))

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: PathLike, storage_options: dict[str, Any] | None = None
    ) -> None:
        # One writer: other ranks hold the same state and would race on the same file.
        if self.is_global_zero:
            self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, path: PathLike, weights_only: bool | None = None) -> dict[str, Any]:
        if sharded.is_sharded_checkpoint(path):
            return sharded.consolidate(path)  # one process reads every shard
        return self.checkpoint_io.load_checkpoint(path, weights_only=weights_only)

    def remove_checkpoint(self, path: PathLike) -> None:
        if self.is_global_zero:
            self.checkpoint_io.remove_checkpoint(path)

    @abstractmethod
    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every process's picklable `obj`, indexed by global rank."""

    @abstractmethod
    def on_failure(self, exception: BaseException) -> None:
        """Called first when this process's run fails, before any hook: tell the other processes."""

    @abstractmethod
    def on_exception(self, exception: BaseException) -> None:
        """Called by the trainer's interrupt sequence, before teardown, to release collective resources."""


class SingleDeviceStrategy(Strategy):
    """One process on one device: collectives are identities. Lightning's signature: built alone
    (`SingleDeviceStrategy("cuda:1")`), it takes the accelerator and precision of the Trainer it is given to."""

    @property
    def plain_steps(self) -> bool:
        return type(self.precision) is Precision  # one process, 32-bit: nothing wraps backward or the step

    def __init__(
        self,
        device: str | torch.device = "cpu",
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        # Placeholders until `finish_setup` (the Trainer's flags) fills what was not given.
        super().__init__(accelerator, precision_plugin, checkpoint_io)  # type: ignore[arg-type]
        self._root_device = torch.device(device)
        if accelerator is not None:
            self._check_device(accelerator)

    def finish_setup(self, accelerator: Accelerator, precision: Precision) -> None:
        """The Trainer's accelerator and precision, where the strategy was built without them."""
        if self.accelerator is None:
            self._check_device(accelerator)
            self.accelerator = accelerator
        if self.precision is None:
            self.precision = precision

    def _check_device(self, accelerator: Accelerator) -> None:
        if self._root_device.type != accelerator.name:
            raise ValueError(
                f"device {str(self._root_device)!r} does not belong to accelerator {accelerator.name!r}; "
                f"give a {accelerator.name!r} device"
            )

    @property
    def root_device(self) -> torch.device:
        return self._root_device

    @property
    def world_size(self) -> int:
        return 1

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def num_devices(self) -> int:
        return 1

    def barrier(self, name: str | None = None) -> None:
        """Nothing to wait for: this is the only process."""

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if src != 0:
            raise ValueError(f"broadcast src={src!r} does not exist: the only process is rank 0")
        return obj

    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        _check_reduce_op(reduce_op)
        return tensor

    def all_gather(self, tensor: Tensor, group: Any | None = None, sync_grads: bool = False) -> Tensor:
        return tensor

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return bool(decision)

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def on_failure(self, exception: BaseException) -> None:
        """One process has no peers to tell."""

    def on_exception(self, exception: BaseException) -> None:
        """One process holds no process group or peers, so an exception leaves nothing to release."""

    def __repr__(self) -> str:
        return (
            f"SingleDeviceStrategy(accelerator={getattr(self.accelerator, 'name', None)!r}, "
            f"device={str(self.root_device)!r}, precision={getattr(self.precision, 'name', None)!r})"
        )


def indexed_optimizer_state(state: dict[str, Any]) -> dict[str, Any]:
    """`torch.optim`'s layout (parameters numbered in group order) of an optimizer state keyed by parameter names,
    as a sharded strategy saves it; a state already numbered is returned as it is."""
    groups = state.get("param_groups", [])
    names = [name for group in groups for name in group.get("params", [])]
    if not names or not all(isinstance(name, str) for name in names):
        return state
    index = {name: number for number, name in enumerate(names)}
    return {
        "state": {index[name]: value for name, value in state.get("state", {}).items() if name in index},
        "param_groups": [{**group, "params": [index[name] for name in group["params"]]} for group in groups],
    }


def _check_reduce_op(reduce_op: Any) -> None:
    """Refuse ops that a multi-process run would refuse, so a typo is caught on one device too."""
    if isinstance(reduce_op, str):
        if reduce_op.lower() in _REDUCE_OPS:
            return
    elif torch.distributed.is_available():
        from torch.distributed import ReduceOp

        if isinstance(reduce_op, (ReduceOp, ReduceOp.RedOpType)):
            return
    raise ValueError(
        f"reduce_op={reduce_op!r} is not a reduction; use one of {list(_REDUCE_OPS)} "
        "(any case) or a torch.distributed.ReduceOp"
    )
