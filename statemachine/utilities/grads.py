"""`lightning.pytorch.utilities.grads`: gradient norms to log, e.g. from `on_before_optimizer_step`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["grad_norm"]


def grad_norm(module: nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, Tensor]:
    """The `norm_type` norm of each parameter's gradient, keyed `grad_{norm}_norm{sep}{name}`, plus their
    norm over all parameters as `grad_{norm}_norm_total`. Parameters without a gradient are left out."""
    try:
        norm = float(norm_type)
    except (TypeError, ValueError):
        raise ValueError(f"norm_type must be a positive number or 'inf' (infinity norm); got {norm_type!r}") from None
    if not norm > 0:
        raise ValueError(f"norm_type must be a positive number or 'inf' (infinity norm); got {norm_type!r}")
    norms = {
        f"grad_{norm}_norm{group_separator}{name}": param.grad.detach().norm(norm)
        for name, param in module.named_parameters()
        if param.grad is not None
    }
    if norms:
        norms[f"grad_{norm}_norm_total"] = torch.stack(list(norms.values())).norm(norm)
    return norms
