"""Precision plugins: how the module's numbers are represented during forward, backward and step."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from devices.transfer import convert_floating
from devices.warning_types import DeviceWarning

# Every value Lightning 2.x accepts for `precision`, mapped to its canonical name.
_LIGHTNING_PRECISIONS: dict[Any, str] = {
    "64-true": "64-true",
    "64": "64-true",
    64: "64-true",
    "32-true": "32-true",
    "32": "32-true",
    32: "32-true",
    "16-mixed": "16-mixed",
    "16": "16-mixed",
    16: "16-mixed",
    "bf16-mixed": "bf16-mixed",
    "bf16": "bf16-mixed",
    "16-true": "16-true",
    "bf16-true": "bf16-true",
}
# Lightning names that need hardware libraries this trainer does not drive.
_NOT_SUPPORTED = ("transformer-engine", "transformer-engine-float16")
_ALLOWED = (
    "'64-true' (64, '64'), '32-true' (None, 32, '32'), '16-mixed' (16, '16'), 'bf16-mixed' ('bf16'), "
    "'16-true', 'bf16-true'"
)
_MIXED_DEVICES = ("cpu", "cuda")


@dataclass(slots=True)
class StepClosure:
    """The work before one optimizer update, in the two parts a precision may need to separate.

    Calling it runs both parts in order, which is what a plain `optimizer.step(closure)` needs. A gradient
    scaler runs them apart: it must unscale the gradients after `compute` and before `before_update`, whose
    hooks and clipping have to see the true gradients.
    """

    compute: Callable[[], Any]  # forward and backward; returns the loss, None when nothing was backpropagated
    before_update: Callable[[], None]  # the pre-step hooks and gradient clipping
    automatic: bool  # automatic optimization: a None loss then means the step has nothing to apply

    def __call__(self) -> Any:
        result = self.compute()
        self.before_update()
        return result


ModuleT = TypeVar("ModuleT", bound=nn.Module)


class Precision:
    """Full 32-bit precision: the module and its arithmetic stay as PyTorch made them."""

    name: str = "32-true"
    scaler: torch.amp.GradScaler | None = None  # a gradient scaler that scales losses and may skip updates

    def convert_module(self, module: ModuleT) -> ModuleT:
        return module

    def convert_input(self, data: Any) -> Any:
        """The batch as the step should see it."""
        return data

    @property
    def casts_input(self) -> bool:
        """Whether `convert_input` changes a batch at all (a loop may skip the call when it does not)."""
        return type(self).convert_input is not Precision.convert_input

    def tensor_init_context(self) -> AbstractContextManager[None]:
        """Where `trainer.init_module()` creates parameters: in the dtype this precision trains in."""
        return nullcontext()

    def forward_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def pre_backward(self, loss: Tensor) -> Tensor:
        """The tensor that backward hooks receive and backpropagate."""
        return loss

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        # Extra arguments (e.g. retain_graph from manual_backward) go straight to autograd.
        loss.backward(*args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, closure: StepClosure, **kwargs: Any) -> Any:
        return optimizer.step(closure=closure, **kwargs)

    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str) -> None:
        """Clip the gradients of `optimizer`'s parameters: by value or by their total norm."""
        if clip_val <= 0:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(params, clip_val)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A non-empty state was written by a plugin that keeps state (e.g. a grad scaler); dropping it
        # silently would change the run's numerics after resume.
        if state_dict:
            raise ValueError(
                f"precision {self.name!r} keeps no state, but the checkpoint holds precision state with keys "
                f"{sorted(state_dict)}; it was written with a different precision"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class MixedPrecision(Precision):
    """Autocast around every step; for '16-mixed' also a gradient scaler, so small fp16 gradients survive.

    The scaler multiplies the loss before backward, unscales the gradients before the pre-step hooks and
    clipping, skips the update when a gradient is inf or NaN (lowering the scale) and raises the scale
    after a run of good steps. Its state is checkpointed under this class's name.
    """

    def __init__(self, precision: str, device: str, scaler: torch.amp.GradScaler | None = None) -> None:
        if precision not in ("16-mixed", "bf16-mixed"):
            raise ValueError(f"MixedPrecision(precision={precision!r}) is not valid; use '16-mixed' or 'bf16-mixed'")
        if device not in _MIXED_DEVICES:
            raise ValueError(f"MixedPrecision(device={device!r}) is not valid; use one of {list(_MIXED_DEVICES)}")
        if scaler is not None and precision == "bf16-mixed":
            raise ValueError(
                f"MixedPrecision('bf16-mixed') takes no gradient scaler (bfloat16 has float32's range), got {scaler!r}"
            )
        if scaler is None and precision == "16-mixed":
            scaler = torch.amp.GradScaler(device)
        self.name = precision
        self.device = device
        self.scaler = scaler
        self._dtype = torch.float16 if precision == "16-mixed" else torch.bfloat16

    def forward_context(self) -> AbstractContextManager[None]:
        return torch.autocast(self.device, dtype=self._dtype)

    def pre_backward(self, loss: Tensor) -> Tensor:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def optimizer_step(self, optimizer: Optimizer, closure: StepClosure, **kwargs: Any) -> Any:
        scaler = self.scaler
        if scaler is None:
            return super().optimizer_step(optimizer, closure, **kwargs)
        if isinstance(optimizer, torch.optim.LBFGS):
            raise RuntimeError(
                "precision='16-mixed' cannot step LBFGS: its gradient scaler needs one closure call per step, and "
                "LBFGS calls it many times; use '32-true' or 'bf16-mixed'"
            )
        loss = closure.compute()
        skipped_backward = loss is None and closure.automatic
        if not skipped_backward and not _unscales_itself(optimizer):
            scaler.unscale_(optimizer)
        closure.before_update()
        if skipped_backward:
            return loss
        # GradScaler.step skips the update when unscaling found an inf or NaN gradient.
        output = scaler.step(optimizer, **kwargs)
        scaler.update()
        return output

    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str) -> None:
        if clip_val > 0 and self.scaler is not None and _unscales_itself(optimizer):
            raise RuntimeError(
                f"{type(optimizer).__qualname__} unscales its gradients inside step() (a fused optimizer?), so they "
                "are still scaled when clipping runs; turn off gradient clipping or use a non-fused optimizer"
            )
        super().clip_gradients(optimizer, clip_val, algorithm)

    def state_dict(self) -> dict[str, Any]:
        return {} if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Without a scaler (bf16-mixed) there is nothing to restore; an empty state (a checkpoint from a run
        # without a scaler) leaves the fresh scaler as it is.
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)


class _TruePrecision(Precision):
    """The whole module, its floating-point inputs and the tensors created in a step use one dtype."""

    dtype: torch.dtype

    def convert_module(self, module: ModuleT) -> ModuleT:
        return module.to(dtype=self.dtype)

    def convert_input(self, data: Any) -> Any:
        return convert_floating(data, self.dtype)

    def tensor_init_context(self) -> AbstractContextManager[None]:
        return _default_dtype(self.dtype)

    def forward_context(self) -> AbstractContextManager[None]:
        return _default_dtype(self.dtype)


class HalfPrecision(_TruePrecision):
    """'16-true' (float16) or 'bf16-true' (bfloat16): no float32 master weights."""

    def __init__(self, precision: str = "16-true") -> None:
        if precision not in ("16-true", "bf16-true"):
            raise ValueError(f"HalfPrecision(precision={precision!r}) is not valid; use '16-true' or 'bf16-true'")
        self.name = precision
        self.dtype = torch.float16 if precision == "16-true" else torch.bfloat16


class DoublePrecision(_TruePrecision):
    """'64-true': float64 everywhere."""

    name = "64-true"
    dtype = torch.float64


# The precisions Lightning's FSDPPrecision takes, in its order.
_FSDP_PRECISIONS = ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")


class FSDPPrecision(Precision):
    """Lightning's precision plugin for `FSDPStrategy`: `precision` says how the sharded module computes.

    It trains as the plain plugin of that name does (autocast, input casting, the step), on the run's
    accelerator; `mixed_precision_config` is the FSDP2 `MixedPrecisionPolicy` the strategy shards with.
    '16-mixed' is refused: its gradient scaler does not handle sharded gradients.
    """

    def __init__(self, precision: str, scaler: Any = None) -> None:
        if precision not in _FSDP_PRECISIONS:
            raise ValueError(
                f"`precision={precision!r})` is not supported in FSDP. `precision` must be one of: {_FSDP_PRECISIONS}."
            )
        if precision == "16-mixed" or scaler is not None:
            raise ValueError(
                f"FSDPPrecision({precision!r}, scaler={scaler!r}) is not supported: a gradient scaler does not handle "
                "sharded gradients; use 'bf16-mixed' (or 'bf16-true', '32-true')"
            )
        self.name = precision
        self.plain = resolve_precision(precision)

    @property
    def precision(self) -> str:
        return self.name

    def on_accelerator(self, device_type: str) -> None:
        """Autocast where the run computes."""
        self.plain = resolve_precision(self.name, device_type)

    @property
    def mixed_precision_config(self) -> Any:
        """The FSDP2 `MixedPrecisionPolicy` for this precision."""
        return fsdp_policy(self.plain)

    def convert_module(self, module: ModuleT) -> ModuleT:
        return self.plain.convert_module(module)

    def convert_input(self, data: Any) -> Any:
        return self.plain.convert_input(data)

    @property
    def casts_input(self) -> bool:
        return self.plain.casts_input

    def tensor_init_context(self) -> AbstractContextManager[None]:
        return self.plain.tensor_init_context()

    def forward_context(self) -> AbstractContextManager[None]:
        return self.plain.forward_context()


def fsdp_policy(precision: Precision) -> Any:
    """The FSDP2 `MixedPrecisionPolicy` a sharded module computes under with `precision`: 'bf16-mixed' gathers
    bfloat16 copies of the float32 shards and reduces gradients in float32; the others compute in their
    parameters' own dtype."""
    from torch.distributed.fsdp import MixedPrecisionPolicy  # loaded on first use: importing FSDP2 is slow

    plain = precision.plain if isinstance(precision, FSDPPrecision) else precision
    if isinstance(plain, MixedPrecision):
        return MixedPrecisionPolicy(param_dtype=plain._dtype, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _unscales_itself(optimizer: Optimizer) -> bool:
    # Fused torch optimizers take the scaler's inf check into their own step and unscale there.
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def canonical_precision(value: Any) -> str:
    """Lightning's canonical name for a `precision` value (an alias such as 16 or 'bf16' included)."""
    if value is None:
        return "32-true"
    # Only ints and strings name a precision: True would hash like 1, and 32.0 like 32.
    valid_type = isinstance(value, (int, str)) and not isinstance(value, bool)
    if valid_type and value in _NOT_SUPPORTED:
        raise ValueError(f"precision={value!r} (NVIDIA Transformer Engine) is not supported; use one of: {_ALLOWED}")
    canonical = _LIGHTNING_PRECISIONS.get(value) if valid_type else None
    if canonical is None:
        raise ValueError(
            f"Precision {value!r} is invalid. Allowed precision values: {_ALLOWED} "
            f"(precision={value!r}: use one of them)"
        )
    return canonical


def resolve_precision(value: Any, device_type: str = "cpu") -> Precision:
    """Map a Trainer `precision` value to its plugin, for an accelerator of `device_type` ('cpu' or 'cuda')."""
    canonical = canonical_precision(value)
    if canonical == "16-mixed" and device_type == "cpu":
        warnings.warn(
            f"precision={value!r} asks for float16 mixed precision, which is not supported on the CPU; "
            "running with precision='bf16-mixed' instead",
            DeviceWarning,
            stacklevel=2,
        )
        canonical = "bf16-mixed"
    if canonical in ("16-mixed", "bf16-mixed"):
        return MixedPrecision(canonical, device_type)
    if canonical in ("16-true", "bf16-true"):
        return HalfPrecision(canonical)
    if canonical == "64-true":
        return DoublePrecision()
    return Precision()
