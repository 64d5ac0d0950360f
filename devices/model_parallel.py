"""Lightning's `ModelParallelStrategy`: a 2-D device mesh (`data_parallel` x `tensor_parallel`) that the module's
`configure_model` parallelizes itself with (`fully_shard`, `parallelize_module`), through `self.device_mesh`."""

from __future__ import annotations

from datetime import timedelta

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from devices.accelerators import Accelerator
from devices.parallel import DEFAULT_TIMEOUT
from devices.precision import Precision
from devices.sharded_strategy import ShardedStrategy
from devices.strategy import ModuleT

MESH_DIMS = ("data_parallel", "tensor_parallel")


class ModelParallelStrategy(ShardedStrategy):
    """`data_parallel_size` x `tensor_parallel_size` must be the world size; "auto" takes the number of nodes
    for data parallelism and the devices of each node for tensor parallelism. `save_distributed_checkpoint=True`
    writes DCP folders; False one full file from rank 0."""

    weights_key = "state_dict"

    def __init__(
        self,
        data_parallel_size: int | str = "auto",
        tensor_parallel_size: int | str = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | None = DEFAULT_TIMEOUT,
    ) -> None:
        for name, value in (("data_parallel_size", data_parallel_size), ("tensor_parallel_size", tensor_parallel_size)):
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"ModelParallelStrategy({name}={value!r}) is not valid; use 'auto' or an int >= 1")
        super().__init__(process_group_backend=process_group_backend, timeout=timeout)
        self._data_parallel_size = data_parallel_size
        self._tensor_parallel_size = tensor_parallel_size
        self.save_distributed = bool(save_distributed_checkpoint)
        self.device_mesh: DeviceMesh | None = None

    def mesh_shape(self) -> tuple[int, int]:
        data = self.num_nodes if self._data_parallel_size == "auto" else int(self._data_parallel_size)
        tensor = self.num_processes if self._tensor_parallel_size == "auto" else int(self._tensor_parallel_size)
        if data * tensor != self.world_size:
            raise RuntimeError(
                f"The sizes `data_parallel_size={data}` and `tensor_parallel_size={tensor}` multiplied should equal "
                f"the world size ({self.world_size})"
            )
        return data, tensor

    def finish_setup(self, accelerator: Accelerator, devices: list[torch.device], precision: Precision) -> None:
        super().finish_setup(accelerator, devices, precision)
        self.mesh_shape()  # sizes that cannot make the world fail here, before any process starts

    def setup_environment(self, store_host: tuple[str, int] | None = None) -> None:
        super().setup_environment(store_host)
        self.device_mesh = init_device_mesh(self.root_device.type, self.mesh_shape(), mesh_dim_names=MESH_DIMS)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """The ranks of one tensor-parallel group read the same batches: the data splits over data parallelism."""
        data, _ = self.mesh_shape()
        rank = 0 if self.device_mesh is None else self.device_mesh["data_parallel"].get_local_rank()
        return {"num_replicas": data, "rank": rank}

    def setup_module(self, module: ModuleT) -> ModuleT:
        module = super().setup_module(module)
        if not any(isinstance(p, DTensor) for p in module.parameters()):
            raise TypeError(
                "When using the `ModelParallelStrategy`, you are required to override the `configure_model()` hook "
                "in the LightningModule and apply parallelization there (no parameter is sharded: apply "
                "fully_shard or parallelize_module with self.device_mesh)"
            )
        if not isinstance(module, FSDPModule):
            # The module itself is the outer unit over the data-parallel ranks: its own parameters get their
            # gradients reduced too, and its step methods gather what they use.
            assert self.device_mesh is not None
            fully_shard(module, mesh=self.device_mesh["data_parallel"])
        return self.finish_sharding(module)

    def __repr__(self) -> str:
        shape = (self._data_parallel_size, self._tensor_parallel_size)
        return f"ModelParallelStrategy(mesh={shape!r}, save_distributed_checkpoint={self.save_distributed})"
