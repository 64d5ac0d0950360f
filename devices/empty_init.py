"""Skipping weight initialisation while a module is built, for weights a checkpoint will overwrite anyway."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.overrides import TorchFunctionMode


class EmptyInit(TorchFunctionMode):
    """While active and enabled, the `torch.nn.init` functions return their tensor untouched.

    Parameters then keep the uninitialised memory `torch.empty` gave them: building a large model costs no
    random draws or fills. Disabled, it changes nothing.
    """

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.enabled and getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)
