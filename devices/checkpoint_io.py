"""Checkpoint files through fsspec: atomic writes, and loads whose errors name the file and the fault."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import posixpath
import uuid
from typing import IO, Any

import torch
from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs

PathLike = str | os.PathLike[str]

_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default (zip) format
_PICKLE_MAGIC = b"\x80"  # torch.save's legacy format starts with a pickle protocol opcode
# torch.load reports a damaged archive or a foreign pickle only through RuntimeError; these phrases
# tell them apart from RuntimeErrors that are not about the file (e.g. a CUDA map_location on a CPU host).
_TORCH_CORRUPTION_PHRASES = ("PytorchStreamReader", "magic number")


class CorruptCheckpointError(ValueError):
    """The file exists but does not hold a readable checkpoint dict."""


def save_checkpoint(checkpoint: dict[str, Any], path: PathLike, storage_options: dict[str, Any] | None = None) -> None:
    """Write `checkpoint` with torch.save so that `path` holds either the old file or the complete new one."""
    shown = os.fspath(path)
    fs, fs_path = url_to_fs(shown, **(storage_options or {}))
    parent, name = posixpath.split(fs_path)
    # fsspec strips a trailing slash, which would turn a directory the user meant into a file name.
    if not name or shown.endswith(("/", os.sep)):
        raise ValueError(f"Checkpoint path {shown!r} names a directory; give a file name")
    if parent:
        fs.makedirs(parent, exist_ok=True)
    # Same directory as the target, so the final move is a rename on local disks; hidden and suffixed
    # so that checkpoint globs (*.ckpt) never pick up a half-written file.
    temporary = posixpath.join(parent, f".{name}.tmp-{uuid.uuid4().hex}")
    try:
        with fs.open(temporary, "wb") as stream:
            torch.save(checkpoint, stream)
            _sync_to_disk(stream)
        fs.mv(temporary, fs_path)
    except BaseException:
        _remove_quietly(fs, temporary)
        raise


def load_checkpoint(
    path: PathLike,
    map_location: Any = None,
    storage_options: dict[str, Any] | None = None,
    weights_only: bool = False,
) -> dict[str, Any]:
    """Read a checkpoint written by torch.save (ours or Lightning's) and check it is a dict.

    `weights_only=True` is torch's safe mode: only tensors and plain Python values are unpickled.
    """
    shown = os.fspath(path)
    fs, fs_path = url_to_fs(shown, **(storage_options or {}))
    if not fs.exists(fs_path):
        raise FileNotFoundError(errno.ENOENT, "Checkpoint file not found", shown)
    if fs.isdir(fs_path):
        raise IsADirectoryError(
            errno.EISDIR, "Checkpoint path is a directory (sharded checkpoints are not supported yet)", shown
        )
    with fs.open(fs_path, "rb") as stream:
        header = stream.read(len(_ZIP_MAGIC))
        if not header:
            raise CorruptCheckpointError(f"Checkpoint file {shown!r} is empty (0 bytes)")
        if not (header.startswith(_ZIP_MAGIC) or header.startswith(_PICKLE_MAGIC)):
            raise CorruptCheckpointError(
                f"Checkpoint file {shown!r} is not a PyTorch checkpoint: it starts with {header!r}, "
                "not with the header torch.save writes"
            )
        stream.seek(0)
        checkpoint = _torch_load(stream, shown, map_location, weights_only)
    if not isinstance(checkpoint, dict):
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} holds a {type(checkpoint).__name__}, but a checkpoint must be a dict"
        )
    return checkpoint


def remove_checkpoint(path: PathLike, storage_options: dict[str, Any] | None = None) -> None:
    """Delete a checkpoint; a file that is already gone is not an error (top-k pruning may race a user)."""
    fs, fs_path = url_to_fs(os.fspath(path), **(storage_options or {}))
    with contextlib.suppress(FileNotFoundError):
        fs.rm(fs_path, recursive=True)


def exists(path: PathLike, storage_options: dict[str, Any] | None = None) -> bool:
    fs, fs_path = url_to_fs(os.fspath(path), **(storage_options or {}))
    return bool(fs.exists(fs_path))


def _torch_load(stream: IO[bytes], shown: str, map_location: Any, weights_only: bool) -> Any:
    try:
        # weights_only=False by default: checkpoints carry hparams, loop state and RNG states, not only tensors.
        return torch.load(stream, map_location=map_location, weights_only=weights_only)
    except (EOFError, pickle.UnpicklingError) as error:
        if weights_only and isinstance(error, pickle.UnpicklingError) and "Weights only load failed" in str(error):
            raise pickle.UnpicklingError(
                f"Checkpoint file {shown!r} holds objects that weights_only=True refuses to unpickle; "
                "load it with weights_only=False if you trust its source"
            ) from error
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is truncated or corrupt: {_first_sentence(error)}"
        ) from error
    except RuntimeError as error:
        if not any(phrase in str(error) for phrase in _TORCH_CORRUPTION_PHRASES):
            raise
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is truncated, corrupt or not written by torch.save: {_first_sentence(error)}"
        ) from error


def _first_sentence(error: BaseException) -> str:
    # torch's archive errors run on for several sentences of internal advice; the first says what broke.
    text = " ".join(str(error).split()) or type(error).__name__
    return text.split(". ")[0]


def _sync_to_disk(stream: IO[bytes]) -> None:
    """Flush a local file to disk before the rename, so a crash cannot leave an empty file under the name."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError):  # io.UnsupportedOperation is an OSError
        return  # remote and in-memory files have no descriptor; their stores commit on close
    stream.flush()
    os.fsync(descriptor)


def _remove_quietly(fs: AbstractFileSystem, path: str) -> None:
    # Cleanup must never hide the error that made it necessary.
    with contextlib.suppress(Exception):
        if fs.exists(path):
            fs.rm(path)
