"""`lightning.pytorch.utilities.seed` (and fabric's seed helpers): seeding, and running code without disturbing the
random generators."""

from __future__ import annotations

import contextlib
from collections.abc import Generator

from stages import rng
from stages.seed import seed_everything

__all__ = ["isolate_rng", "seed_everything"]


@contextlib.contextmanager
def isolate_rng(include_cuda: bool = True) -> Generator[None, None, None]:
    """Python's, numpy's and torch's generator states (CUDA's too, unless `include_cuda=False`) are put back as
    they were when the block exits, so the draws inside it do not change what is drawn after it."""
    state = rng.capture()
    if not include_cuda:
        state.pop("cuda", None)
    try:
        yield
    finally:
        rng.restore(state)
