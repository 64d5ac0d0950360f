"""DDP: every rank holds the whole model; DistributedDataParallel averages the gradients in backward."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from devices.accelerators import Accelerator
from devices.checkpoint_plugin import CheckpointIO
from devices.environments import ClusterEnvironment
from devices.parallel import DEFAULT_TIMEOUT, ParallelStrategy
from devices.precision import Precision
from devices.strategy import ModuleT

if TYPE_CHECKING:
    from devices.flag_ride import FlagsRideGradients

# DDP's first gradient bucket holds up to 1 MiB: a model whose gradients fit is all-reduced in one bucket.
_FIRST_BUCKET_BYTES = 1 << 20


class DDPStrategy(ParallelStrategy):
    """Lightning's `DDPStrategy`: `timeout` bounds every collective; `ddp_comm_hook` (with its `ddp_comm_state`,
    wrapped by `ddp_comm_wrapper` when given) replaces DDP's gradient all-reduce, on every device; extra keyword
    arguments go to `DistributedDataParallel` (for example `find_unused_parameters=True`)."""

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
        ddp_comm_state: object | None = None,
        ddp_comm_hook: Callable[..., Any] | None = None,
        ddp_comm_wrapper: Callable[..., Any] | None = None,
        model_averaging_period: int | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        _check_comm_hook(ddp_comm_state, ddp_comm_hook, ddp_comm_wrapper, model_averaging_period)
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            precision=precision,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            num_nodes=num_nodes,
            checkpoint_io=checkpoint_io,
        )
        self.ddp_kwargs = ddp_kwargs
        self._comm_state, self._comm_hook = ddp_comm_state, ddp_comm_hook
        if ddp_comm_hook is not None and ddp_comm_wrapper is not None:
            self._comm_hook = ddp_comm_wrapper(ddp_comm_hook)
        self._ride: FlagsRideGradients | None = None

    @property
    def plain_steps(self) -> bool:
        """In 32-bit precision backward and the optimizer step are plain: DDP all-reduces the gradients from inside
        backward, prepared by its forward, which the module's `training_step` goes through (see `setup_module`)."""
        return type(self.precision) is Precision

    def setup_module(self, module: ModuleT) -> ModuleT:
        module = super().setup_module(module)
        if self.world_size > 1 and any(p.requires_grad for p in module.parameters()):
            device_ids = [self.root_device.index] if self.root_device.type == "cuda" else None
            self.model = DistributedDataParallel(_StepRouter(module), device_ids=device_ids, **self.ddp_kwargs)
            if self._comm_hook is not None:
                self.model.register_comm_hook(self._comm_state, self._comm_hook)
            elif _gradient_bytes(module) <= min(_FIRST_BUCKET_BYTES, self.model.bucket_bytes_cap):
                from devices.flag_ride import FlagsRideGradients  # torch's comm hooks load only for a DDP fit

                self._ride = FlagsRideGradients(self.model.process_group)
                self.model.register_comm_hook(None, self._ride.all_reduce)
            # The training step runs through DDP's forward, which prepares the gradient all-reduce of backward.
            module.__dict__["training_step"] = _RoutedStep(self.model)
        return module

    def start_any(self, flags: Tensor) -> Callable[[], Tensor]:
        """For a model all-reduced in one bucket, without a communication hook of the user's, the flags ride the
        next backward's gradient all-reduce, which every rank runs anyway: agreeing on them costs no collective of
        their own. When no backward ran before the call, it agrees on them itself, at once (the same on every rank:
        DDP's backward is collective).

        A larger model keeps DDP's built-in all-reduce: a Python communication hook runs for every bucket, and over
        several buckets costs more than the flags' one small collective."""
        ride = self._ride
        if ride is None:
            return super().start_any(flags)
        ride.board(flags)

        def wait() -> Tensor:
            agreed = ride.alight()
            return self.reduce(flags, reduce_op="max") if agreed is None else agreed

        return wait

    def teardown(self, module: nn.Module | None = None, optimizers: Any = ()) -> None:
        if module is not None:
            module.__dict__.pop("training_step", None)
        self.model = self.lightning_module  # unwrapped, as after Lightning's teardown
        self._ride = None
        super().teardown(module, optimizers)


class _StepRouter(nn.Module):
    """What DDP wraps: its forward is the LightningModule's training step."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return cast(Any, type(self.module)).training_step(self.module, *args, **kwargs)


class _RoutedStep:
    def __init__(self, model: DistributedDataParallel) -> None:
        self.model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)


def _gradient_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def _check_comm_hook(state: object, hook: Any, wrapper: Any, averaging_period: int | None) -> None:
    """A state or wrapper without a hook would do nothing; post-local SGD needs its optimizer wrapped, which this
    strategy does not do (the ranks' models would drift apart unaveraged)."""
    if hook is None and (state is not None or wrapper is not None):
        given = "ddp_comm_state" if state is not None else "ddp_comm_wrapper"
        raise ValueError(f"DDPStrategy({given}=...) needs ddp_comm_hook=..., the hook it goes with")
    if averaging_period is not None or (state is not None and _post_local_sgd(state)):
        raise ValueError(
            "DDPStrategy with post-local SGD (model_averaging_period=..., a PostLocalSGDState) is not supported"
        )


def _post_local_sgd(state: object) -> bool:
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState

    return isinstance(state, PostLocalSGDState)
