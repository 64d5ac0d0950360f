"""Rank-zero helpers (`lightning.pytorch.utilities.rank_zero`), for one process.

The rank is read from the launcher's environment (RANK, LOCAL_RANK, SLURM_PROCID, JSM_NAMESPACE_RANK; 0 when none
is set). Decorated functions run only on rank zero; the messages go to the `statemachine` logger or `warnings`.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

_log = logging.getLogger("statemachine")
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
T = TypeVar("T")


def _rank_from_environment() -> int:
    for name in _RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None:
            return int(value)
    return 0


class _RankZeroOnly:
    """`@rank_zero_only` runs the function on rank zero and returns `default` elsewhere; `.rank` is settable."""

    def __init__(self) -> None:
        self.rank = _rank_from_environment()

    @overload
    def __call__(self, fn: Callable[..., T]) -> Callable[..., T | None]: ...

    @overload
    def __call__(self, fn: Callable[..., T], default: T) -> Callable[..., T]: ...

    def __call__(self, fn: Callable[..., T], default: Any = None) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self.rank == 0:
                return fn(*args, **kwargs)
            return default

        return wrapped


rank_zero_only = _RankZeroOnly()


def rank_zero_info(*args: Any, stacklevel: int = 2, **kwargs: Any) -> None:
    if rank_zero_only.rank == 0:
        _log.info(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_debug(*args: Any, stacklevel: int = 2, **kwargs: Any) -> None:
    if rank_zero_only.rank == 0:
        _log.debug(*args, stacklevel=stacklevel, **kwargs)


def rank_zero_warn(message: str | Warning, stacklevel: int = 2, **kwargs: Any) -> None:
    """`warnings.warn` on rank zero (a UserWarning unless `category=` says otherwise)."""
    if rank_zero_only.rank == 0:
        warnings.warn(message, stacklevel=stacklevel + 1, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 2, **kwargs: Any) -> None:
    rank_zero_warn(message, stacklevel=stacklevel + 1, category=kwargs.pop("category", DeprecationWarning), **kwargs)


__all__ = ["rank_zero_debug", "rank_zero_deprecation", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]
