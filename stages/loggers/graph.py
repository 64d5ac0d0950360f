"""The model graph a logger records at the start of a run: `forward` traced on the module's example input."""

from __future__ import annotations

import warnings
from typing import Any

from torch import Tensor

from devices.transfer import move_to_device
from stages import data
from stages.exceptions import TrainerWarning
from stages.hooks import is_overridden
from stages.module import LightningModule


def graph_input(model: LightningModule, input_array: Any) -> tuple[Tensor, ...] | Tensor | None:
    """`input_array` (default: `model.example_input_array`) on the model's device, moved as a batch is; None,
    with a warning that says why, when there is nothing that can be traced."""
    example = model.example_input_array if input_array is None else input_array
    if example is None:
        warnings.warn(
            "The model graph is not logged: the model has no `example_input_array` and no `input_array` was given",
            TrainerWarning,
            stacklevel=3,
        )
        return None
    if not isinstance(example, Tensor | tuple):
        warnings.warn(
            f"The model graph is not logged: its input is a {type(example).__name__}, which cannot be traced; "
            "give a tensor, or a tuple of the positional arguments of `forward`",
            TrainerWarning,
            stacklevel=3,
        )
        return None
    trainer = model._trainer
    if trainer is not None:
        return data.transfer(trainer, example, 0)
    # Outside a run the module's own transfer hooks move it; the default one needs no strategy for that.
    example = model.on_before_batch_transfer(example, 0)
    if is_overridden("transfer_batch_to_device", model, LightningModule):
        example = model.transfer_batch_to_device(example, model.device, 0)
    else:
        example = move_to_device(example, model.device)
    return model.on_after_batch_transfer(example, 0)
