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
from typing import Any, TypeVar, overload

_log = logging.getLogger("statemachine")
ReturnT = TypeVar("ReturnT")

# Checked in this order: torchrun/our launcher set RANK; SLURM sets SLURM_PROCID; LOCAL_RANK alone (rank within a node)
# is the last resort for a launcher that sets nothing else but IBM's jsrun, which sets JSM_NAMESPACE_RANK.
_RANK_VARIABLES = ("RANK", "SLURM_PROCID", "LOCAL_RANK", "JSM_NAMESPACE_RANK")


def launcher_rank() -> int | None:
    """The global rank a launcher gave this process in its environment; None when no launcher set one."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _rank_from_environment() -> int:
    rank = launcher_rank()
    return 0 if rank is None else rank


class _RankZeroOnly:
    """Decorator: the wrapped function runs on global rank 0 and returns `default` (None unless given)
    elsewhere; `.rank` is settable."""

    def __init__(self) -> None:
        self.rank = _rank_from_environment()

    @overload
    def __call__(self, fn: Callable[..., ReturnT]) -> Callable[..., ReturnT | None]: ...

    @overload
    def __call__(self, fn: Callable[..., ReturnT], default: ReturnT) -> Callable[..., ReturnT]: ...

    def __call__(self, fn: Callable[..., ReturnT], default: Any = None) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self.rank == 0:
                return fn(*args, **kwargs)
            return default

        return wrapped


rank_zero_only = _RankZeroOnly()

# The stack levels are Lightning's numbers (4: the function that called the helper), whose helpers sit one frame
# deeper than these: each passes one less to logging or warnings.


@rank_zero_only
def rank_zero_info(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    _log.info(*args, stacklevel=stacklevel - 1, **kwargs)


@rank_zero_only
def rank_zero_debug(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    _log.debug(*args, stacklevel=stacklevel - 1, **kwargs)


@rank_zero_only
def rank_zero_warn(message: str | Warning, stacklevel: int = 4, **kwargs: Any) -> None:
    warnings.warn(message, stacklevel=stacklevel - 1, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Any) -> None:
    """A DeprecationWarning (or the given `category`) on rank zero."""
    rank_zero_warn(message, stacklevel=stacklevel, category=kwargs.pop("category", DeprecationWarning), **kwargs)
