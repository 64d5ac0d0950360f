"""`lightning.pytorch.core.saving`: hyperparameter files, and the filesystem of a path."""

from __future__ import annotations

import os
from typing import Any

import fsspec

from stages.saving import (
    load_hparams_from_tags_csv,
    load_hparams_from_yaml,
    save_hparams_to_tags_csv,
    save_hparams_to_yaml,
)

__all__ = [
    "get_filesystem",
    "load_hparams_from_tags_csv",
    "load_hparams_from_yaml",
    "save_hparams_to_tags_csv",
    "save_hparams_to_yaml",
]


def get_filesystem(path: str | os.PathLike[str], **kwargs: Any) -> fsspec.AbstractFileSystem:
    """The fsspec filesystem `path` lives on (local for a plain path); `kwargs` are its storage options."""
    fs, _ = fsspec.core.url_to_fs(os.fspath(path), **kwargs)
    return fs
