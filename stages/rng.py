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
    # The Mersenne Twister keys of python and numpy (624 numbers each) are held as one tensor each, not as lists of
    # ints: a checkpoint then pickles two objects instead of some 2500 (the state is taken twice).
    version, internal, gauss_next = random.getstate()
    python = (version, torch.tensor(internal, dtype=torch.int64), gauss_next)
    state: dict[str, Any] = {"python": python, "torch": torch.get_rng_state()}
    numpy = _numpy()
    if numpy is not None:
        name, keys, position, has_gauss, cached_gaussian = numpy.random.get_state()
        state["numpy"] = (name, torch.from_numpy(keys.astype(numpy.int64)), position, has_gauss, cached_gaussian)
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    """Set the generators to `state`; a generator this process lacks (numpy, CUDA devices) is left out."""
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(_numbers(internal)), gauss_next))
    torch.set_rng_state(state["torch"].cpu())
    numpy = _numpy()
    if numpy is not None and "numpy" in state:
        name, keys, position, has_gauss, cached_gaussian = state["numpy"]
        keys = numpy.array(_numbers(keys), dtype=numpy.uint32)
        numpy.random.set_state((name, keys, position, has_gauss, cached_gaussian))
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


def _numbers(keys: Any) -> list[int]:
    """A generator's keys as ints: a tensor, or the list or tuple that checkpoints of earlier versions hold."""
    return keys.tolist() if isinstance(keys, torch.Tensor) else list(keys)
