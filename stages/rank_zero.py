"""Rank-zero helpers: run a function, print or warn only on the process with global rank 0.

`rank_zero_only.rank` starts from the launcher's environment variables (so code that runs before the trainer knows
its rank already behaves) and the trainer sets it once its strategy knows the global rank.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

_log = logging.getLogger(__name__)
ReturnT = TypeVar("ReturnT")

# Checked in this order: torchrun/our launcher set RANK; SLURM sets SLURM_PROCID; LOCAL_RANK alone (rank within a node)
# is the last resort for a launcher that sets nothing else.
_RANK_VARIABLES = ("RANK", "SLURM_PROCID", "LOCAL_RANK")


def _rank_from_environment() -> int:
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


class _RankZeroOnly:
    """Decorator: the wrapped function runs on global rank 0 and returns None elsewhere."""

    def __init__(self) -> None:
        self.rank = _rank_from_environment()

    def __call__(self, fn: Callable[..., ReturnT]) -> Callable[..., ReturnT | None]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> ReturnT | None:
            if self.rank == 0:
                return fn(*args, **kwargs)
            return None

        return wrapped


rank_zero_only = _RankZeroOnly()


@rank_zero_only
def rank_zero_info(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    _log.info(*args, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_debug(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    _log.debug(*args, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_warn(message: str | Warning, stacklevel: int = 4, **kwargs: Any) -> None:
    warnings.warn(message, stacklevel=stacklevel, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Any) -> None:
    """A DeprecationWarning (or the given `category`) on rank zero."""
    rank_zero_warn(message, stacklevel=stacklevel, category=kwargs.pop("category", DeprecationWarning), **kwargs)
