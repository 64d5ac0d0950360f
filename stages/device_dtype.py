"""`device` and `dtype` of a module, tracked through `.to()`, `.cuda()`, `.cpu()`, `.half()`, ... as Lightning does.

Tracking the calls (instead of looking at a parameter) keeps both right for modules without parameters and for
modules whose parameters are created later (`configure_model`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class DeviceDtypeModuleMixin(nn.Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dtype: torch.dtype = torch.get_default_dtype()
        self._device = torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @dtype.setter
    def dtype(self, new_dtype: torch.dtype) -> None:
        raise RuntimeError(f"module.dtype cannot be set (got {new_dtype!r}); use module.to({new_dtype!r})")

    @property
    def device(self) -> torch.device:
        device = self._device
        # a bare "cuda" means the current device; report its index as torch does for tensors
        if device.type == "cuda" and device.index is None:
            return torch.device("cuda", torch.cuda.current_device())
        return device

    def to(self, *args: Any, **kwargs: Any) -> Any:
        device, dtype = torch._C._nn._parse_to(*args, **kwargs)[:2]
        self._track(device=device, dtype=dtype)
        return super().to(*args, **kwargs)

    def cuda(self, device: torch.device | int | None = None) -> Any:
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        elif isinstance(device, int):
            device = torch.device("cuda", device)
        self._track(device=device)
        return super().cuda(device=device)

    def cpu(self) -> Any:
        self._track(device=torch.device("cpu"))
        return super().cpu()

    def type(self, dst_type: torch.dtype | str) -> Any:
        self._track(dtype=dst_type if isinstance(dst_type, torch.dtype) else None)
        return super().type(dst_type)

    def float(self) -> Any:
        self._track(dtype=torch.float)
        return super().float()

    def double(self) -> Any:
        self._track(dtype=torch.double)
        return super().double()

    def half(self) -> Any:
        self._track(dtype=torch.half)
        return super().half()

    def bfloat16(self) -> Any:
        self._track(dtype=torch.bfloat16)
        return super().bfloat16()

    def _track(self, device: torch.device | None = None, dtype: torch.dtype | None = None) -> None:
        """Record the new device and dtype on this module and every tracking submodule."""
        for module in self.modules():
            if isinstance(module, DeviceDtypeModuleMixin):
                if device is not None:
                    module._device = torch.device(device)
                if dtype is not None and dtype.is_floating_point:
                    module._dtype = dtype
