"""Precision plugins: how the module's numbers are represented during forward, backward and step."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from torch import Tensor, nn
from torch.optim import Optimizer

_SUPPORTED = "'32-true' (aliases: None, 32, '32')"

# Every value Lightning 2.x accepts for `precision`, mapped to its canonical name.
_LIGHTNING_PRECISIONS: dict[Any, str] = {
    "32-true": "32-true",
    "32": "32-true",
    32: "32-true",
    "64-true": "64-true",
    "64": "64-true",
    64: "64-true",
    "16-mixed": "16-mixed",
    "16": "16-mixed",
    16: "16-mixed",
    "bf16-mixed": "bf16-mixed",
    "bf16": "bf16-mixed",
    "16-true": "16-true",
    "bf16-true": "bf16-true",
    "transformer-engine": "transformer-engine",
    "transformer-engine-float16": "transformer-engine-float16",
}


class Precision:
    """Full 32-bit precision: the module and its arithmetic stay as PyTorch made them."""

    name: str = "32-true"

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module

    def forward_context(self) -> AbstractContextManager[None]:
        return nullcontext()

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        # Extra arguments (e.g. retain_graph from manual_backward) go straight to autograd.
        loss.backward(*args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any], **kwargs: Any) -> Any:
        return optimizer.step(closure=closure, **kwargs)

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
        return f"Precision({self.name!r})"


def resolve_precision(value: Any) -> Precision:
    """Map a Trainer `precision` value to its plugin; refuse every value this project does not run yet."""
    if isinstance(value, Precision):
        return value
    if value is None:
        return Precision()
    # Only ints and strings name a precision: True would hash like 1, and 32.0 like 32.
    valid_type = isinstance(value, (int, str)) and not isinstance(value, bool)
    canonical = _LIGHTNING_PRECISIONS.get(value) if valid_type else None
    if canonical == "32-true":
        return Precision()
    if canonical is not None:
        alias = "" if value == canonical else f" (Lightning's alias of {canonical!r})"
        raise ValueError(f"precision={value!r}{alias} is recognised but not supported yet; supported: {_SUPPORTED}")
    raise ValueError(f"precision={value!r} is not a known precision; supported: {_SUPPORTED}")
