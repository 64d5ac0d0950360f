"""The random generators a run draws from: python `random`, numpy (if installed), torch CPU and every CUDA device.

`capture` returns their states in a form `torch.load(weights_only=True)` accepts; `restore` sets them back. The sanity
check uses them so it does not change training's draws, checkpoints so a resume continues
with the draws of an uninterrupted run.
"""

from __future__ import annotations

import random
from typing import Any

import torch


def capture() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy = _numpy()
    if numpy is not None:
        name, keys, position, has_gauss, cached_gaussian = numpy.random.get_state()
        state["numpy"] = (name, keys.tolist(), position, has_gauss, cached_gaussian)
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    """Set the generators to `state`; a generator this process lacks (numpy, CUDA devices) is left out."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"].cpu())
    numpy = _numpy()
    if numpy is not None and "numpy" in state:
        name, keys, position, has_gauss, cached_gaussian = state["numpy"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, cached_gaussian))
    if torch.cuda.is_available():
        for device, device_state in enumerate(state.get("cuda", [])[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(device_state.cpu(), device)


def _numpy() -> Any:
    """numpy is optional; its generator is captured only when it is installed."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy
