"""Seeding every random generator a training run draws from."""

from __future__ import annotations

import os
import random

import torch


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed python, numpy (when installed) and torch (CPU and every CUDA device); returns the seed used."""
    if workers:
        raise ValueError("seed_everything(workers=True) (seeding dataloader workers) is not supported yet")
    if seed is None:
        seed = int(os.environ.get("PL_GLOBAL_SEED", random.randint(0, 2**32 - 1)))
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed} must be in [0, 2**32 - 1]")
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass  # numpy is optional: without it there is no numpy generator to seed
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)
    return seed
