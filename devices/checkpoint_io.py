"""Checkpoint files through fsspec: atomic writes, and loads whose errors name the file and the fault."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import posixpath
import re
import tempfile
import traceback
import uuid
from typing import IO, Any, BinaryIO, cast

import torch
from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

PathLike = str | os.PathLike[str]

_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default (zip) format
_PICKLE_MAGIC = b"\x80"  # torch.save's legacy format starts with a pickle protocol opcode
# A zip archive ends with this record (22 bytes plus a comment of at most 64 KiB): a cut file has lost it.
_ZIP_END_MAGIC = b"PK\x05\x06"
_ZIP_END_SIZE = 22
_ZIP_END_SEARCH = _ZIP_END_SIZE + 0xFFFF
# Temporary files of saves in flight: `.<name>.tmp-<32 hex digits>`, a pattern no user file is likely to match.
TEMPORARY_MARK = ".tmp-"
TEMPORARY_NAME = re.compile(r"\..+\.tmp-[0-9a-f]{32}")


class CorruptCheckpointError(ValueError):
    """The file exists but does not hold a readable checkpoint dict."""


def save_checkpoint(checkpoint: dict[str, Any], path: PathLike, storage_options: dict[str, Any] | None = None) -> None:
    """Write `checkpoint` with torch.save so that `path` holds either the old file or the complete new one.

    Errors name `path`: an OSError keeps its errno (a full disk says "No space left on device"), and a Ctrl-C
    reaches the caller as KeyboardInterrupt, with the previous file untouched.
    """
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
    temporary = posixpath.join(parent, f".{name}{TEMPORARY_MARK}{uuid.uuid4().hex}")
    if isinstance(fs, LocalFileSystem):
        _save_local(checkpoint, fs_path, temporary, shown)
    else:
        _save_remote(checkpoint, fs, fs_path, temporary, shown)


def remove_stale_temporaries(directory: PathLike, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Delete the temporary files (and sharded checkpoint folders) that interrupted saves (kill -9, power loss)
    left in `directory`.

    Only names this module writes are touched. Call it when a run starts saving into `directory`: a save in
    flight from another process into the same directory would lose its file.
    """
    fs, root = url_to_fs(os.fspath(directory), **(storage_options or {}))
    if not fs.isdir(root):
        return []
    stale = [path for path in fs.ls(root, detail=False) if TEMPORARY_NAME.fullmatch(posixpath.basename(path))]
    for path in stale:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=fs.isdir(path))
    return stale


def load_checkpoint(
    path: PathLike,
    map_location: Any = None,
    storage_options: dict[str, Any] | None = None,
    weights_only: bool = False,
) -> dict[str, Any]:
    """Read a checkpoint written by torch.save (ours or Lightning's) and check it is a dict.

    `weights_only=True` is torch's safe mode: only tensors and plain Python values are unpickled.

    A file that cannot be read as one raises CorruptCheckpointError naming the file and the fault; only
    errors that are not about the content pass through (a missing file, a failing disk, a device
    `map_location` names that this host lacks).
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
        if header.startswith(_ZIP_MAGIC):
            _check_zip_complete(stream, shown)
        elif not header.startswith(_PICKLE_MAGIC):
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
    """Delete a checkpoint: a file, a folder of shards, or a local link to either (the link only); one that is
    already gone is not an error (top-k pruning may race a user)."""
    fs, fs_path = url_to_fs(os.fspath(path), **(storage_options or {}))
    with contextlib.suppress(FileNotFoundError):
        if isinstance(fs, LocalFileSystem) and os.path.islink(fs_path):
            os.remove(fs_path)  # a recursive delete would follow the link into a folder it does not own
        else:
            fs.rm(fs_path, recursive=True)


def exists(path: PathLike, storage_options: dict[str, Any] | None = None) -> bool:
    fs, fs_path = url_to_fs(os.fspath(path), **(storage_options or {}))
    return bool(fs.exists(fs_path))


# ---- writing --------------------------------------------------------------------------------------------


class _WriterStream:
    """The file torch.save writes into, open for as long as torch's zip writer can write to it.

    Writes are the C-level `write` of a real file: a Ctrl-C cannot raise inside one (which torch would turn into
    an "unexpected pos" RuntimeError), and OS errors keep their errno. After a failed save torch's writer may
    still write its end record when it is freed; a closed file there aborts the process, so on failure the file
    closes only when the last holder, possibly that writer, lets it go.
    """

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.write = file.write

    def flush(self) -> None:
        self._file.flush()

    def sync(self) -> None:
        """Flush to the disk before the rename, so a crash cannot leave an empty file under the final name."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __del__(self) -> None:
        self._file.close()


def _save_local(checkpoint: dict[str, Any], fs_path: str, temporary: str, shown: str) -> None:
    try:
        _serialize(checkpoint, temporary, shown)
        os.replace(temporary, fs_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    _sync_directory(posixpath.dirname(fs_path))


def _save_remote(checkpoint: dict[str, Any], fs: AbstractFileSystem, fs_path: str, temporary: str, shown: str) -> None:
    """Serialize to a local file, then upload: a store's file object would carry torch's writes (and any
    Ctrl-C during them) through Python code."""
    descriptor, staging = tempfile.mkstemp(prefix=".statemachine-upload-", suffix=".ckpt")
    os.close(descriptor)
    try:
        _serialize(checkpoint, staging, f"{staging} (the local copy of {shown})")
        fs.put_file(staging, temporary)
        fs.mv(temporary, fs_path)
    except BaseException:
        _remove_quietly(fs, temporary)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.remove(staging)


def _serialize(checkpoint: dict[str, Any], local_path: str, shown: str) -> None:
    stream = _WriterStream(open(local_path, "wb"))  # closed by close() or when the last holder goes
    try:
        torch.save(checkpoint, cast(IO[bytes], stream))  # it calls only write and flush
        stream.sync()
    except BaseException as error:
        # torch.save's frames in the tracebacks hold its zip writer, and the writer holds the file: clearing them
        # frees the writer now, so the file closes and a full disk gets its space back before anyone retries.
        for raised in _chain(error):
            traceback.clear_frames(raised.__traceback__)
        del stream
        cause = _root_cause(error)
        if isinstance(cause, OSError) and cause.errno is not None:
            raise OSError(cause.errno, cause.strerror, shown) from error
        if cause is not error:
            raise cause from None  # a Ctrl-C that landed inside a write
        raise
    stream.close()


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it happened during, innermost last."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__context__
    return chain


def _root_cause(error: BaseException) -> BaseException:
    """torch.save reports a failure inside a write as RuntimeError("unexpected pos ..."), with the real error,
    an OSError or a KeyboardInterrupt, only as its context."""
    for raised in _chain(error):
        if isinstance(raised, OSError) or not isinstance(raised, Exception):
            return raised
    return error


def _sync_directory(directory: str) -> None:
    """Make the rename durable: after a crash the directory must not still list the old file."""
    if not hasattr(os, "O_DIRECTORY"):
        return  # Windows cannot open a directory; NTFS journals the rename itself
    descriptor = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        # Some filesystems (several FUSE ones) refuse fsync on a directory; the rename is done all the same.
        if error.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(descriptor)


def _remove_quietly(fs: AbstractFileSystem, path: str) -> None:
    # Cleanup must never hide the error that made it necessary.
    with contextlib.suppress(Exception):
        if fs.exists(path):
            fs.rm(path)


# ---- reading --------------------------------------------------------------------------------------------


def _check_zip_complete(stream: IO[bytes], shown: str) -> None:
    """A cut file has lost the archive's closing record; without this check torch seeks before the file's start
    and reports a bare OSError."""
    stream.seek(0, os.SEEK_END)
    size = stream.tell()
    tail_length = min(size, _ZIP_END_SEARCH)
    stream.seek(size - tail_length)
    tail = stream.read(tail_length)
    position = tail.rfind(_ZIP_END_MAGIC)
    while position >= 0:
        end = position + _ZIP_END_SIZE
        if end <= len(tail) and end + int.from_bytes(tail[end - 2 : end], "little") == len(tail):
            return  # the record, and the comment its last two bytes announce, end exactly at the file's end
        position = tail.rfind(_ZIP_END_MAGIC, 0, position)
    raise CorruptCheckpointError(
        f"Checkpoint file {shown!r} is truncated: its {size} bytes end before the zip archive's closing record "
        "(an interrupted write or an incomplete copy)"
    )


def _torch_load(stream: IO[bytes], shown: str, map_location: Any, weights_only: bool) -> Any:
    try:
        # weights_only=False by default: checkpoints carry hparams, loop state and RNG states, not only tensors.
        return torch.load(stream, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as error:
        if weights_only and "Weights only load failed" in str(error):
            raise pickle.UnpicklingError(
                f"Checkpoint file {shown!r} holds objects that weights_only=True refuses to unpickle; "
                "load it with weights_only=False if you trust its source"
            ) from error
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is truncated or corrupt: {_first_sentence(error)}"
        ) from error
    except MemoryError as error:
        # A damaged size field asks for absurd allocations; a genuinely huge file reads the same way here.
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is corrupt, or needs more memory than this host has, to load: MemoryError"
        ) from error
    except OSError as error:
        # EINVAL comes from a seek to an offset the file's own records give; other errors are the storage's.
        if error.errno != errno.EINVAL:
            raise
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is corrupt: an offset recorded in it points outside the file"
        ) from error
    except (ImportError, AttributeError) as error:
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is corrupt or needs code that is not importable here: {_first_sentence(error)}"
        ) from error
    except RuntimeError as error:
        if "map_location" in str(error):
            raise  # the file is fine; it names a device this host lacks
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is truncated, corrupt or not written by torch.save: {_first_sentence(error)}"
        ) from error
    except Exception as error:
        # Damaged pickle data fails in many ways (EOFError, UnpicklingError, ValueError, KeyError, ...).
        raise CorruptCheckpointError(
            f"Checkpoint file {shown!r} is truncated or corrupt: {type(error).__name__}: {_first_sentence(error)}"
        ) from error


def _first_sentence(error: BaseException) -> str:
    # torch's archive errors run on for several sentences of internal advice; the first says what broke.
    text = " ".join(str(error).split()) or type(error).__name__
    return text.split(". ")[0]
