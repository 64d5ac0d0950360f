"""Checkpoint I/O plugins: the object every checkpoint save, load and removal of a run goes through.

A `CheckpointIO` subclass passed in `Trainer(plugins=[...])` (or to a strategy as `checkpoint_io=`) replaces
`TorchCheckpointIO`, the default, which writes atomically through fsspec.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from devices import checkpoint_io
from devices.checkpoint_io import PathLike


class CheckpointIO(ABC):
    """How checkpoint files are written, read and deleted."""

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any | None = None) -> None:
        """Write `checkpoint` (a dict of tensors and plain values) to `path`."""

    @abstractmethod
    def load_checkpoint(
        self, path: PathLike, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Read the checkpoint dict at `path`; `weights_only=True` unpickles tensors and plain values only."""

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete the checkpoint at `path`."""

    def teardown(self) -> None:  # noqa: B027 (optional: most plugins hold nothing to release)
        """Called when the run's strategy tears down: release what the plugin holds."""


class TorchCheckpointIO(CheckpointIO):
    """torch.save and torch.load on local paths and fsspec URLs. A save leaves either the old file or the whole new
    one; `storage_options` are the fsspec options of a remote path."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any | None = None) -> None:
        checkpoint_io.save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(
        self, path: PathLike, map_location: Any | None = "cpu", weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Loads onto the CPU by default: restoring copies into the parameters wherever they live, and a file saved on
        a GPU still opens on a host without one."""
        return checkpoint_io.load_checkpoint(path, map_location=map_location, weights_only=bool(weights_only))

    def remove_checkpoint(self, path: PathLike) -> None:
        checkpoint_io.remove_checkpoint(path)


# Stateless, so every strategy not given a plugin shares it.
DEFAULT_CHECKPOINT_IO = TorchCheckpointIO()
