"""Sharded checkpoints: a folder that `torch.distributed.checkpoint` (DCP) writes, one shard file per rank.

The layout is Lightning's: DCP's `.metadata` and `__<rank>_0.distcp` files hold the tensors under the keys
`model` (FSDPStrategy; `state_dict` for ModelParallelStrategy) and `optimizer_<i>`; `meta.pt` (written by rank 0
with `torch.save`) holds everything else. DCP reshards on load, so a folder written by N ranks loads on M.

A save is as safe as a file save: the ranks write into a hidden temporary folder beside the target, which rank 0
renames to the real name once every rank has finished; a kill at any moment leaves the previous checkpoint and no
partial folder under a real name.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from devices.checkpoint_io import TEMPORARY_MARK, CorruptCheckpointError, PathLike, remove_checkpoint

META_FILE = "meta.pt"
_DCP_METADATA = ".metadata"
MODEL_KEYS = ("model", "state_dict")  # where FSDPStrategy and ModelParallelStrategy keep the weights


@dataclass(frozen=True)
class ShardedEntry:
    """A part of a sharded checkpoint not read yet: the module or one optimizer, read into the live (sharded)
    state when it is restored, so each rank reads only its own shards."""

    folder: str
    key: str


def is_sharded_checkpoint(path: PathLike) -> bool:
    """Whether `path` is a folder DCP wrote (it holds DCP's `.metadata`)."""
    return os.path.isfile(os.path.join(os.fspath(path), _DCP_METADATA))


def local_path(path: PathLike) -> str:
    """The local path of `path`; DCP folders are written through the local (or a mounted network) filesystem."""
    shown = os.fspath(path)
    fs, fs_path = url_to_fs(shown)
    if not isinstance(fs, LocalFileSystem):
        raise ValueError(
            f"sharded checkpoint path {shown!r} is not on a local filesystem; a sharded checkpoint is a folder "
            "every rank writes into: give a local or mounted path, or use state_dict_type='full' "
            "(save_distributed_checkpoint=False) to write one file through fsspec"
        )
    return fs_path


def save(
    tensors: dict[str, Any],
    meta: dict[str, Any],
    path: PathLike,
    is_global_zero: bool,
    broadcast: Callable[[Any], Any],
    barrier: Callable[[str], None],
) -> None:
    """Every rank calls it: write `tensors` (DCP, each rank its shards) and `meta` (rank 0) as the folder `path`."""
    target = Path(local_path(path))
    temporary = target.parent / broadcast(f".{target.name}{TEMPORARY_MARK}{uuid.uuid4().hex}")
    if is_global_zero:
        temporary.mkdir(parents=True)
    barrier("sharded_checkpoint_folder")
    import torch.distributed.checkpoint as dcp  # loaded on first use: importing DCP is slow, most runs skip it

    dcp.save(tensors, checkpoint_id=str(temporary))
    if is_global_zero:
        torch.save(meta, temporary / META_FILE)
    barrier("sharded_checkpoint_written")
    if is_global_zero:
        _replace(temporary, target)
    barrier("sharded_checkpoint_renamed")


def _replace(temporary: Path, target: Path) -> None:
    """Move the complete folder to its name. An older checkpoint there is renamed aside first and deleted after,
    so the name never points at a partial folder."""
    if not target.exists() and not target.is_symlink():
        os.replace(temporary, target)
        return
    aside = target.parent / f".{target.name}{TEMPORARY_MARK}{uuid.uuid4().hex}"
    os.replace(target, aside)
    os.replace(temporary, target)
    remove_checkpoint(aside)


def load_meta(path: PathLike) -> dict[str, Any]:
    """The checkpoint dict of a sharded folder with its tensors left in place: `state_dict` and each entry of
    `optimizer_states` is a `ShardedEntry` the strategy reads into the live state."""
    folder = os.fspath(path)
    meta_file = os.path.join(folder, META_FILE)
    if not os.path.isfile(meta_file):
        raise CorruptCheckpointError(f"{folder}: a sharded checkpoint folder without its {META_FILE}")
    checkpoint: dict[str, Any] = torch.load(meta_file, map_location="cpu", weights_only=False)
    keys = _top_level_keys(folder)
    checkpoint["state_dict"] = ShardedEntry(folder, _model_key(folder, keys))
    optimizers = _optimizer_keys(keys)
    if optimizers:
        checkpoint["optimizer_states"] = [ShardedEntry(folder, key) for key in optimizers]
    return checkpoint


def _top_level_keys(folder: str) -> set[str]:
    import torch.distributed.checkpoint as dcp

    metadata = dcp.FileSystemReader(folder).read_metadata()
    return {key.split(".", 1)[0] for key in metadata.state_dict_metadata}


def _model_key(folder: str, keys: set[str]) -> str:
    for key in MODEL_KEYS:
        if key in keys:
            return key
    raise CorruptCheckpointError(f"{folder}: a DCP folder without weights (no {' or '.join(MODEL_KEYS)} key)")


def _optimizer_keys(keys: set[str]) -> list[str]:
    found = [key for key in keys if key.startswith("optimizer_")]
    return sorted(found, key=lambda key: int(key.removeprefix("optimizer_")))


def read_into(entry: ShardedEntry, state: dict[str, Any]) -> dict[str, Any]:
    """Fill `state` (the live state dict, sharded or full) with the entry's saved values; returns it."""
    import torch.distributed.checkpoint as dcp

    holder = {entry.key: state}
    dcp.load(holder, checkpoint_id=entry.folder)
    return holder[entry.key]


def consolidate(path: PathLike) -> dict[str, Any]:
    """The whole checkpoint of a sharded folder in one process, as a file checkpoint holds it (full tensors;
    optimizer states keyed by parameter name)."""
    folder = os.fspath(path)
    checkpoint = load_meta(folder)
    with tempfile.TemporaryDirectory() as scratch:
        full_file = os.path.join(scratch, "full.pt")
        # DCP's own converter reads every shard into full tensors without a process group.
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(folder, full_file)
        tensors = torch.load(full_file, map_location="cpu", weights_only=False)
    keys = set(tensors)
    checkpoint["state_dict"] = tensors[_model_key(folder, keys)]
    optimizers = _optimizer_keys(keys)
    if optimizers:
        checkpoint["optimizer_states"] = [tensors[key] for key in optimizers]
    return checkpoint
