"""Where the demo datasets keep the data they generate, and the error for data that was never generated."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from statemachine.engine.history import write_atomic

_log = logging.getLogger(__name__)


class DatasetNotFoundError(RuntimeError, AssertionError):
    """The generated data is not on disk and `download=False` forbids generating it. A `RuntimeError`, as
    Lightning's MNIST raises, and an `AssertionError`, as its WikiText2 raises."""


def missing(path: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"Dataset not found. No generated data at {path}; pass download=True to generate it there "
        "(the demo datasets are generated, never downloaded)."
    )


def ensure_file(path: str, download: bool, make: Callable[[], bytes]) -> None:
    """Write `make()` to `path` (atomically) when it is missing and `download` allows it; else refuse."""
    if os.path.isfile(path):
        return
    if not download:
        raise missing(path)
    _log.info(f"Generating {path}")
    write_atomic(path, make())


def tensors_bytes(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()
