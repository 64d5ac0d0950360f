"""DDP: every rank holds the whole model; DistributedDataParallel averages the gradients in backward."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from devices.accelerators import Accelerator
from devices.checkpoint_plugin import CheckpointIO
from devices.environments import ClusterEnvironment
from devices.flag_ride import SLOTS, FlagsRideGradients
from devices.parallel import DEFAULT_TIMEOUT, FlagsInFlight, ParallelStrategy
from devices.precision import Precision
from devices.strategy import ModuleT

# With these DDP finds the parameters a backward uses from the forward's output, which the flags' carrier is not in.
_TRACES_THE_GRAPH = ("find_unused_parameters", "static_graph")


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
        self._static_graph_started = False

    @property
    def plain_steps(self) -> bool:
        """In 32-bit precision backward and the optimizer step are plain: DDP all-reduces the gradients (and the
        flags, see `start_any`) from inside backward, prepared by its forward, which the module's `training_step`
        goes through (see `setup_module`)."""
        return type(self.precision) is Precision

    def setup_module(self, module: ModuleT) -> ModuleT:
        module = super().setup_module(module)
        if self.world_size > 1 and any(p.requires_grad for p in module.parameters()):
            device_ids = [self.root_device.index] if self.root_device.type == "cuda" else None
            if self._flags_may_ride(module):
                self._ride = FlagsRideGradients(self.root_device)
            router = _StepRouter(module, None if self._ride is None else self._ride.carrier)
            self.model = DistributedDataParallel(router, device_ids=device_ids, **self.ddp_kwargs)
            router.__dict__["ddp"] = self.model  # not a submodule: DDP wraps the router
            self._static_graph_started = False
            if self._comm_hook is not None:
                self.model.register_comm_hook(self._comm_state, self._comm_hook)
            # The training step runs through DDP's forward, which prepares the gradient all-reduce of backward.
            module.__dict__["training_step"] = _RoutedStep(self.model, module)
        return module

    def _flags_may_ride(self, module: nn.Module) -> bool:
        """Whether every backward of the run goes through `loss_for_backward`, so that the carrier always gets a
        gradient, as DDP requires of each parameter: automatic optimization (a manual step may call
        `loss.backward()` itself), DDP not tracing the graph from the forward's output, no communication hook of
        the user's (which gets the buckets the carrier is in)."""
        return (
            getattr(module, "automatic_optimization", False)
            and not any(self.ddp_kwargs.get(name) for name in _TRACES_THE_GRAPH)
            and self._comm_hook is None
        )

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """A manual step backpropagates inside DDP's forward (the training step), before DDP prepared the gradient
        all-reduce, as it does when its forward returns: the reducer is prepared here first. With `static_graph`,
        DDP starts the first backward's all-reduce when its forward returns; a manual one needs it started here."""
        model = self.model
        if not isinstance(model, DistributedDataParallel) or self.lightning_module.automatic_optimization:
            return super().backward(loss, *args, **kwargs)
        syncs = torch.is_grad_enabled() and model.require_backward_grad_sync
        model.require_forward_param_sync = syncs
        if syncs:
            model.reducer._rebuild_buckets()  # what DDP's forward does first; in backward it is refused
            model.reducer.prepare_for_backward(
                [loss] if model.find_unused_parameters and not model.static_graph else []
            )
        super().backward(loss, *args, **kwargs)
        if syncs and model.static_graph and not self._static_graph_started:
            # With static_graph DDP holds the first iteration's all-reduce until its forward returns, which is after
            # this backward: it is started here. No public call does it; the C++ Reducer binds the method in torch
            # 2.13, but torch's type stub leaves it out.
            model.reducer._delay_all_reduce()  # type: ignore[attr-defined]
            self._static_graph_started = True

    def loss_for_backward(self, loss: Tensor) -> Tensor:
        ride = self._ride
        return loss if ride is None else ride.carry(loss)

    def start_any(self, flags: Sequence[bool]) -> FlagsInFlight:
        """Under automatic optimization the flags ride the next backward's gradient all-reduce, which every rank
        runs anyway (see `FlagsRideGradients`): agreeing on them costs no collective of their own. When no backward
        carried them by the time the batch is done, they are agreed then, in one (the same on every rank: DDP's
        backward is collective)."""
        ride = self._ride
        if ride is None or len(flags) > SLOTS:
            return super().start_any(flags)
        ride.board(flags)
        agree_in_own_collective = super().start_any

        def settle() -> Callable[[], list[bool]]:
            read = ride.alight()
            return agree_in_own_collective(flags)() if read is None else read

        return settle

    def teardown(self, module: nn.Module | None = None, optimizers: Any = ()) -> None:
        if module is not None:
            module.__dict__.pop("training_step", None)
        self.model = self.lightning_module  # unwrapped, as after Lightning's teardown
        self._ride = None
        super().teardown(module, optimizers)


class _StepRouter(nn.Module):
    """What DDP wraps: its forward is the LightningModule's training step; the flags' carrier, when they ride,
    is a parameter beside the module's (outside the module, its optimizer and its checkpoint)."""

    def __init__(self, module: nn.Module, flags_carrier: nn.Parameter | None) -> None:
        super().__init__()
        self.module = module
        self.flags_carrier = flags_carrier

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        module: Any = self._modules["module"]  # not `self.module`: nn.Module's __getattr__ is a Python call a batch
        output = type(module).training_step(module, *args, **kwargs)
        if not module.automatic_optimization:
            # The manual step ran its backward (prepared by `DDPStrategy.backward`): DDP must not prepare for one
            # more when this forward returns. `_RoutedStep` restores the setting.
            self.__dict__["ddp"].require_backward_grad_sync = False
        return output


class _RoutedStep:
    def __init__(self, model: DistributedDataParallel, module: Any) -> None:
        self.model, self.module = model, module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        model = self.model
        if self.module.automatic_optimization:
            return model(*args, **kwargs)
        syncs = model.require_backward_grad_sync  # False inside the user's `no_sync()`
        try:
            return model(*args, **kwargs)
        finally:
            model.require_backward_grad_sync = syncs


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
