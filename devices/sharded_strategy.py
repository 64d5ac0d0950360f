"""What the sharded strategies share (FSDP and ModelParallel, both on FSDP2): the step methods run through FSDP's
forward hooks, weights created on the meta device are materialised shard by shard, and checkpoints are either one
full file (gathered to rank 0) or a DCP folder of shards."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import register_fsdp_forward_method
from torch.optim import Optimizer

from devices import checkpoint_io, sharded
from devices.checkpoint_io import PathLike
from devices.checkpoint_plugin import CheckpointIO
from devices.parallel import ParallelStrategy
from devices.strategy import ModuleT

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


class ShardedStrategy(ParallelStrategy):
    """A multi-process strategy whose ranks each hold a shard of every parameter (DTensor)."""

    # Whether checkpoints are DCP folders of shards (else one full file, written by rank 0).
    save_distributed = False
    # The key of the weights in a DCP folder (Lightning's: "model" for FSDP, "state_dict" for ModelParallel).
    weights_key = "model"

    @property
    def checkpoint_io(self) -> CheckpointIO:
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, plugin: CheckpointIO) -> None:
        raise ValueError(
            f"{type(self).__name__} with the checkpoint I/O plugin {plugin!r} is not supported: a sharded strategy "
            "writes its checkpoints through torch.distributed.checkpoint, not through a CheckpointIO"
        )

    # ---- the module ---------------------------------------------------------------------------------------

    def finish_sharding(self, module: ModuleT) -> ModuleT:
        """The module's parameters are sharded: make real the parameters still on the meta device (each rank
        only its shard)."""
        if any(p.is_meta for p in (*module.parameters(), *module.buffers())):
            module.to_empty(device=self.root_device)
            for submodule in module.modules():
                reset = getattr(submodule, "reset_parameters", None)
                if callable(reset):
                    reset()
        return module

    def route_steps(self, module: nn.Module, names: Iterable[str]) -> None:
        """Each step runs as a forward of the sharded module: FSDP gathers the parameters before it and frees
        them after, and its backward reduces the gradients."""
        for name in names:
            register_fsdp_forward_method(module, name)
            # The wrapper takes *args: keep the step's own signature, which decides the arguments it is given.
            getattr(module, name).__func__.__signature__ = inspect.signature(getattr(type(module), name))

    def model_to_device(self, module: ModuleT) -> ModuleT:
        if any(p.is_meta for p in module.parameters()):
            return module  # meta weights (empty_init) are made real after sharding, shard by shard
        return super().model_to_device(module)

    @contextmanager
    def tensor_init_context(self, empty_init: bool | None = None) -> Iterator[None]:
        """`empty_init=True`: the model is made on the meta device (no memory at all); sharding then materialises
        each rank's shard only, so no rank ever holds the whole model."""
        if not empty_init:
            with super().tensor_init_context(empty_init):
                yield
            return
        with torch.device("meta"), self.precision.tensor_init_context():
            yield

    # ---- state dicts --------------------------------------------------------------------------------------

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        if self.save_distributed:
            return get_model_state_dict(module)
        return get_model_state_dict(module, options=_FULL)  # full tensors on rank 0, empty elsewhere

    def gathered_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        return get_model_state_dict(module, options=_FULL)

    def optimizer_state_dict(self, module: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
        if not _optimizes(module, optimizer):
            return optimizer.state_dict()
        if self.save_distributed:
            return get_optimizer_state_dict(module, optimizer)
        return get_optimizer_state_dict(module, optimizer, options=_FULL)

    def load_module_state_dict(self, module: nn.Module, state: Any, strict: bool = True) -> None:
        if isinstance(state, sharded.ShardedEntry):
            live = sharded.read_into(state, get_model_state_dict(module))
            set_model_state_dict(module, live, options=StateDictOptions(strict=strict))
            return
        set_model_state_dict(module, state, options=StateDictOptions(full_state_dict=True, strict=strict))

    def load_optimizer_state_dict(self, module: nn.Module, optimizer: Optimizer, state: Any) -> None:
        if not _optimizes(module, optimizer):
            optimizer.load_state_dict(state)
            return
        if isinstance(state, sharded.ShardedEntry):
            live = sharded.read_into(state, get_optimizer_state_dict(module, optimizer))
            set_optimizer_state_dict(module, optimizer, live)
            return
        full = named_optimizer_state(state, module, optimizer)
        set_optimizer_state_dict(module, optimizer, full, options=StateDictOptions(full_state_dict=True))

    # ---- checkpoint files ---------------------------------------------------------------------------------

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: PathLike, storage_options: dict[str, Any] | None = None
    ) -> None:
        """Every rank calls it. Sharded: a DCP folder at `path`; full: one file, written by rank 0."""
        path = self.broadcast(os.fspath(path))  # every rank writes into the folder rank 0 named
        if not self.save_distributed:
            if self.is_global_zero and sharded.is_sharded_checkpoint(path):
                checkpoint_io.remove_checkpoint(path)
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError(
                f"{type(self).__name__}.save_checkpoint(..., storage_options=...) is not supported: a sharded "
                "checkpoint is a local folder written by DCP, not through fsspec"
            )
        meta = dict(checkpoint)
        tensors: dict[str, Any] = {self.weights_key: meta.pop("state_dict")}
        tensors.update({f"optimizer_{i}": state for i, state in enumerate(meta.pop("optimizer_states", []))})
        sharded.save(tensors, meta, path, self.is_global_zero, self.broadcast, self.barrier)

    def load_checkpoint(self, path: PathLike, weights_only: bool | None = None) -> dict[str, Any]:
        if sharded.is_sharded_checkpoint(path):
            return sharded.load_meta(path)  # the tensors are read into the live shards when restored
        return super().load_checkpoint(path, weights_only)


def named_optimizer_state(state: dict[str, Any], module: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
    """An optimizer state in `torch.optim`'s numbered layout, keyed by parameter names instead (the layout the
    sharded strategies load), numbering the parameters in this optimizer's group order."""
    names = {id(parameter): name for name, parameter in module.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    groups = state.get("param_groups", [])
    if any(isinstance(p, str) for group in groups for p in group.get("params", [])):
        return state
    return {
        "state": {order[index]: value for index, value in state.get("state", {}).items()},
        "param_groups": [{**group, "params": [order[index] for index in group["params"]]} for group in groups],
    }


def _optimizes(module: nn.Module, optimizer: Optimizer) -> bool:
    """Whether `optimizer` steps parameters of `module` (a stand-in optimizer without any is saved as it is)."""
    owned = {id(p) for p in module.parameters()}
    return any(id(p) in owned for group in optimizer.param_groups for p in group["params"])
