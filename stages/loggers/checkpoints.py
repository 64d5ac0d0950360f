"""Which checkpoint files a tracker uploads: the ones a checkpoint callback holds that it has not sent yet."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class SavedCheckpoint:
    path: str
    modified: float
    score: float | None
    is_best: bool


def checkpoints_to_upload(callback: Any, uploaded: dict[str, float]) -> list[SavedCheckpoint]:
    """The files of `callback` (last, best and top-k) that exist and were written after their last upload
    (`uploaded` maps a path to the modification time it was sent at), oldest first. A file saved again under
    the same name (`last.ckpt`) is sent again."""
    scores: dict[str, Any] = {}
    if callback.last_model_path:
        scores[callback.last_model_path] = callback.current_score
    if callback.best_model_path:
        scores[callback.best_model_path] = callback.best_model_score
    scores.update(callback.best_k_models)
    found = []
    for path, score in scores.items():
        if not os.path.isfile(path):
            continue
        modified = os.path.getmtime(path)
        if path not in uploaded or uploaded[path] < modified:
            value = float(score.item()) if isinstance(score, torch.Tensor) else score
            found.append(SavedCheckpoint(path, modified, value, path == callback.best_model_path))
    return sorted(found, key=lambda saved: (saved.modified, saved.path))


def checkpoint_settings(callback: Any) -> dict[str, Any]:
    """The callback's settings that say what a checkpoint is, stored with each uploaded file."""
    names = ("monitor", "mode", "save_last", "save_top_k", "save_weights_only", "_every_n_train_steps")
    return {name: getattr(callback, name) for name in names if hasattr(callback, name)}
