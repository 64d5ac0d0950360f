"""OnExceptionCheckpoint: when a run fails, save a checkpoint to resume from."""

from __future__ import annotations

import os
from typing import Any

from stages.callbacks.callback import Checkpoint


class OnExceptionCheckpoint(Checkpoint):
    """On any exception during a run, writes `dirpath/filename.ckpt` (replacing an older one)."""

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        if not isinstance(filename, str) or not filename:
            raise ValueError(f"filename {filename!r} must be a non-empty string")
        self.dirpath = os.fspath(dirpath)
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        trainer.save_checkpoint(self.ckpt_path)
