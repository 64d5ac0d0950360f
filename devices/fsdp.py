"""Lightning's `FSDPStrategy`, built on FSDP2 (`torch.distributed.fsdp.fully_shard`): every parameter is split
across the ranks and gathered only around the forward and backward of the layer that owns it. Runs on CUDA with
NCCL and on the CPU with gloo (Lightning needs a GPU), so a sharded job can be debugged on a laptop.

Lightning's arguments keep their meaning, mapped onto FSDP2: `sharding_strategy` picks the device mesh and
`reshard_after_forward`; `mixed_precision` (or `precision="bf16-mixed"`) an FSDP2 `MixedPrecisionPolicy`;
`cpu_offload` a `CPUOffloadPolicy`; `activation_checkpointing_policy` wraps layers in activation checkpointing.
What FSDP2 cannot honour is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from devices.accelerators import Accelerator
from devices.environments import ClusterEnvironment
from devices.parallel import DEFAULT_TIMEOUT
from devices.precision import MixedPrecision, Precision, fsdp_policy
from devices.sharded_strategy import ShardedStrategy
from devices.strategy import ModuleT

# Lightning's sharding strategies: how the mesh is laid out, and whether parameters are freed after forward.
_SHARDING = {
    "FULL_SHARD": ("shard", True),
    "SHARD_GRAD_OP": ("shard", False),
    "NO_SHARD": ("replicate", False),
    "HYBRID_SHARD": ("hybrid", True),
    "_HYBRID_SHARD_ZERO2": ("hybrid", False),
}
_STATE_DICT_TYPES = ("full", "sharded")
# fully_shard's own arguments, passed through; FSDP1's other keyword arguments have no FSDP2 meaning.
_FULLY_SHARD_KWARGS = ("reshard_after_forward", "shard_placement_fn")

Policy = Callable[..., bool] | Iterable[type[nn.Module]] | None


class FSDPStrategy(ShardedStrategy):
    """Lightning's `FSDPStrategy(auto_wrap_policy=..., activation_checkpointing_policy=..., cpu_offload=...,
    mixed_precision=..., sharding_strategy=..., state_dict_type=..., device_mesh=...)` on FSDP2.

    `auto_wrap_policy`: the layer classes to shard as units (a set), or FSDP1's callable
    `(module, recurse, nonwrapped_numel) -> bool`; the LightningModule itself is always the outer unit.
    `state_dict_type="full"`: a checkpoint is one ordinary file (gathered to rank 0) that loads with no strategy;
    `"sharded"`: a DCP folder, one shard file per rank.
    """

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: Any = None,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = DEFAULT_TIMEOUT,
        cpu_offload: Any = None,
        mixed_precision: Any = None,
        auto_wrap_policy: Policy = None,
        activation_checkpointing: Any = None,
        activation_checkpointing_policy: Policy = None,
        sharding_strategy: Any = "FULL_SHARD",
        state_dict_type: str = "full",
        device_mesh: tuple[int, int] | DeviceMesh | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            precision=precision,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        if checkpoint_io is not None:
            self.checkpoint_io = checkpoint_io  # refused: the sharded strategies save through DCP
        unknown = sorted(set(kwargs) - set(_FULLY_SHARD_KWARGS))
        if unknown:
            raise ValueError(
                f"FSDPStrategy({', '.join(f'{k}=...' for k in unknown)}) is not supported: FSDP2 has no such option; "
                f"the extra keyword arguments fully_shard takes are {list(_FULLY_SHARD_KWARGS)}"
            )
        self.sharding_strategy = _sharding_name(sharding_strategy)
        layout, reshard = _SHARDING[self.sharding_strategy]
        if device_mesh is not None and layout != "hybrid":
            raise ValueError(
                f"FSDPStrategy(device_mesh={device_mesh!r}) needs sharding_strategy='HYBRID_SHARD' (or "
                f"'_HYBRID_SHARD_ZERO2'), got {self.sharding_strategy!r}"
            )
        if state_dict_type not in _STATE_DICT_TYPES:
            raise ValueError(f"FSDPStrategy(state_dict_type={state_dict_type!r}) is not valid; use 'full' or 'sharded'")
        self.state_dict_type = state_dict_type
        self.save_distributed = state_dict_type == "sharded"
        self.auto_wrap_policy = _policy("auto_wrap_policy", auto_wrap_policy)
        if activation_checkpointing is not None and activation_checkpointing_policy is not None:
            raise ValueError(
                "give FSDPStrategy either activation_checkpointing or activation_checkpointing_policy, not both"
            )
        checkpointing = activation_checkpointing_policy
        if activation_checkpointing is not None:
            checkpointing = activation_checkpointing
        if isinstance(checkpointing, type):
            checkpointing = {checkpointing}
        self.activation_checkpointing_policy = _policy("activation_checkpointing_policy", checkpointing)
        self.cpu_offload = _offload_policy(cpu_offload)
        self.mixed_precision = _mixed_precision_policy(mixed_precision)
        self._mesh_shape = None if isinstance(device_mesh, DeviceMesh) else device_mesh
        self._fully_shard_kwargs = {"reshard_after_forward": reshard, **kwargs}
        self.device_mesh: DeviceMesh | None = device_mesh if isinstance(device_mesh, DeviceMesh) else None

    def finish_setup(self, accelerator: Accelerator, devices: list[torch.device], precision: Precision) -> None:
        if isinstance(self.cpu_offload, CPUOffloadPolicy) and accelerator.name == "cpu":
            raise ValueError(
                "FSDPStrategy(cpu_offload=True) with accelerator='cpu': the parameters already live on the CPU; "
                "cpu_offload needs accelerator='cuda'"
            )
        if isinstance(precision, MixedPrecision) and precision.scaler is not None:
            raise ValueError(
                f"FSDPStrategy with precision={precision.name!r} is not supported: its gradient scaler does not "
                "handle sharded gradients; use precision='bf16-mixed' (or 'bf16-true', '32-true')"
            )
        super().finish_setup(accelerator, devices, precision)

    def setup_environment(self, store_host: tuple[str, int] | None = None) -> None:
        super().setup_environment(store_host)
        if self.device_mesh is None:
            self.device_mesh = self._make_mesh()

    def _make_mesh(self) -> DeviceMesh:
        device_type = self.root_device.type
        layout = _SHARDING[self.sharding_strategy][0]
        if layout == "shard":
            return init_device_mesh(device_type, (self.world_size,))
        if layout == "replicate":
            # Every rank a full replica: the shard dimension of FSDP2's hybrid layout has one rank.
            return init_device_mesh(device_type, (self.world_size, 1), mesh_dim_names=("replicate", "shard"))
        shape = self._mesh_shape if self._mesh_shape is not None else (self.num_nodes, self.num_processes)
        if len(shape) != 2 or shape[0] * shape[1] != self.world_size:
            raise ValueError(
                f"FSDPStrategy(device_mesh={shape!r}): HYBRID_SHARD needs (replicas, shards) whose product is the "
                f"world size {self.world_size}"
            )
        return init_device_mesh(device_type, tuple(shape), mesh_dim_names=("replicate", "shard"))

    def setup_module(self, module: ModuleT) -> ModuleT:
        module = super().setup_module(module)
        arguments = {
            "mesh": self.device_mesh,
            "mp_policy": self._mp_policy(),
            "offload_policy": self.cpu_offload,
            **self._fully_shard_kwargs,
        }
        checkpointed = _matching(module, self.activation_checkpointing_policy)
        if checkpointed:
            from torch.distributed._composable import checkpoint

            for layer in checkpointed:
                checkpoint(layer)
        # Inner units first: a unit's parameters are those not already in a unit inside it. Layers the module
        # sharded itself in configure_model stay as they are.
        for layer in reversed(_matching(module, self.auto_wrap_policy)):
            if not isinstance(layer, FSDPModule):
                fully_shard(layer, **arguments)
        if not isinstance(module, FSDPModule):
            fully_shard(module, **arguments)
        return self.finish_sharding(module)

    def _mp_policy(self) -> MixedPrecisionPolicy:
        if self.mixed_precision is not None:
            return self.mixed_precision
        return cast(MixedPrecisionPolicy, fsdp_policy(self.precision))

    def __repr__(self) -> str:
        return (
            f"FSDPStrategy(sharding_strategy={self.sharding_strategy!r}, state_dict_type={self.state_dict_type!r}, "
            f"devices={self.num_processes}, num_nodes={self.num_nodes}, "
            f"precision={getattr(self.precision, 'name', None)!r})"
        )


def _sharding_name(value: Any) -> str:
    name = getattr(value, "name", value)  # FSDP1's ShardingStrategy enum, or its name
    if not isinstance(name, str) or name.upper() not in _SHARDING:
        raise ValueError(f"FSDPStrategy(sharding_strategy={value!r}) is not valid; use one of {list(_SHARDING)}")
    return name.upper()


def _policy(argument: str, value: Any) -> Callable[[nn.Module], bool] | None:
    """A layer predicate from a set of layer classes or FSDP1's `(module, recurse, nonwrapped_numel)` callable."""
    if value is None:
        return None
    if isinstance(value, (set, frozenset, list, tuple)):
        classes = tuple(value)
        if not classes or not all(isinstance(c, type) and issubclass(c, nn.Module) for c in classes):
            raise ValueError(f"{argument}={value!r} must be a non-empty set of nn.Module classes, or a callable")
        return lambda module: isinstance(module, classes)
    if callable(value):
        policy = value
        return lambda module: bool(
            policy(module=module, recurse=False, nonwrapped_numel=sum(p.numel() for p in module.parameters()))
        )
    raise ValueError(f"{argument}={value!r} must be a set of nn.Module classes, or a callable")


def _matching(module: nn.Module, predicate: Callable[[nn.Module], bool] | None) -> list[nn.Module]:
    """The submodules (not the module itself) the predicate selects, parents before their children."""
    if predicate is None:
        return []
    return [m for m in module.modules() if m is not module and predicate(m)]


def _offload_policy(value: Any) -> OffloadPolicy:
    if value is None or value is False:
        return OffloadPolicy()
    if value is True or isinstance(value, CPUOffloadPolicy):
        return value if isinstance(value, CPUOffloadPolicy) else CPUOffloadPolicy()
    if getattr(value, "offload_params", None) is not None:  # FSDP1's CPUOffload(offload_params=...)
        return CPUOffloadPolicy() if value.offload_params else OffloadPolicy()
    raise ValueError(f"FSDPStrategy(cpu_offload={value!r}) is not valid; use True, False or a CPUOffloadPolicy")


def _mixed_precision_policy(value: Any) -> MixedPrecisionPolicy | None:
    """FSDP2's policy as given, or FSDP1's `MixedPrecision` mapped onto it (what FSDP2 has no field for refused)."""
    if value is None or isinstance(value, MixedPrecisionPolicy):
        return value
    fields = ("param_dtype", "reduce_dtype", "buffer_dtype")
    if not all(hasattr(value, name) for name in fields):
        raise ValueError(
            f"FSDPStrategy(mixed_precision={value!r}) is not valid; give a torch.distributed.fsdp.MixedPrecisionPolicy"
        )
    if value.buffer_dtype is not None:
        raise ValueError(
            f"FSDPStrategy(mixed_precision=MixedPrecision(buffer_dtype={value.buffer_dtype})) is not supported: FSDP2 "
            "keeps buffers in their own dtype; convert them in the module, or leave buffer_dtype unset"
        )
    return MixedPrecisionPolicy(param_dtype=value.param_dtype, reduce_dtype=value.reduce_dtype)
