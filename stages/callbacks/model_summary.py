"""A table of the model's layers and parameter counts, logged when fit starts."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from devices.transfer import move_to_device
from stages.callbacks.callback import Callback

_log = logging.getLogger(__name__)
_UNITS = ("", " K", " M", " B", " T")


class ModelSummary(Callback):
    """Logs `summarize(pl_module, max_depth)` at INFO on global rank zero as fit starts (max_depth=0: nothing), as
    Lightning does: it shows on the console unless the program's logging setup sends it elsewhere."""

    def __init__(self, max_depth: int = 1) -> None:
        _check_max_depth(max_depth)
        self._max_depth = max_depth

    @property
    def max_depth(self) -> int:
        return self._max_depth

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self._max_depth == 0 or not trainer.is_global_zero:
            return
        _log.info("\n" + summarize(pl_module, self._max_depth))


def summarize(module: nn.Module, max_depth: int = 1) -> str:
    """The module's submodules down to `max_depth` levels (-1: all, 0: none) with their parameter counts and
    train/eval mode (and their input and output sizes when the module has an `example_input_array`), followed by
    totals for the whole module."""
    return str(Summary(module, max_depth))


class Summary:
    """The numbers behind the summary table (`lightning.pytorch.utilities.model_summary.ModelSummary`)."""

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        _check_max_depth(max_depth)
        self._model = model
        self._max_depth = max_depth
        self._layers = [
            (name, child)
            for name, child in model.named_modules()
            if name and max_depth != 0 and (max_depth == -1 or name.count(".") < max_depth)
        ]
        self._in_sizes, self._out_sizes, counts = _run_example(model, [child for _, child in self._layers])
        # The counter names a layer by the model's class and the layer's path.
        prefix = type(model).__name__
        self._flop_counts = {name: dict(counts.get(f"{prefix}.{name}", {})) for name, _ in self._layers}
        self._total_flops = sum(counts.get("Global", {}).values())

    @property
    def max_depth(self) -> int:
        return self._max_depth

    @property
    def layer_names(self) -> list[str]:
        return [name for name, _ in self._layers]

    @property
    def layer_types(self) -> list[str]:
        return [type(child).__name__ for _, child in self._layers]

    @property
    def param_nums(self) -> list[int]:
        return [_count(child.parameters()) for _, child in self._layers]

    @property
    def training_modes(self) -> list[bool]:
        return [child.training for _, child in self._layers]

    @property
    def in_sizes(self) -> list[Any]:
        """Each layer's input shape in the forward pass on `example_input_array` ("?" when it did not run)."""
        return self._in_sizes

    @property
    def out_sizes(self) -> list[Any]:
        return self._out_sizes

    @property
    def flop_counts(self) -> dict[str, dict[Any, int]]:
        """Each layer's floating-point operations by torch op, in one forward on `example_input_array` (empty
        without one)."""
        return self._flop_counts

    @property
    def total_flops(self) -> int:
        """The whole model's operations in that forward (0 without an example input)."""
        return self._total_flops

    @property
    def named_modules(self) -> list[tuple[str, nn.Module]]:
        """The summarized layers with their names."""
        return list(self._layers)

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def total_training_modes(self) -> dict[str, int]:
        """How many modules (the model itself not counted) are in train and in eval mode."""
        modes = [module.training for name, module in self._model.named_modules() if name]
        return {"train": sum(modes), "eval": len(modes) - sum(modes)}

    @property
    def total_parameters(self) -> int:
        return _count(self._model.parameters())

    @property
    def trainable_parameters(self) -> int:
        return _count(p for p in self._model.parameters() if p.requires_grad)

    @property
    def model_size(self) -> float:
        """The parameters' size in megabytes."""
        params = self._model.parameters()
        return sum(p.numel() * p.element_size() for p in params if not _is_uninitialized(p)) / 1e6

    def layer_table(self) -> tuple[list[str], list[list[str]]]:
        """The layer table's header and rows, as text (the sizes' columns when an example input ran)."""
        header = ["", "Name", "Type", "Params", "Mode", "FLOPs"]
        flops = [human_count(sum(counts.values())) for counts in self._flop_counts.values()]
        rows = [
            [str(index), name, kind, human_count(count), "train" if training else "eval", layer_flops]
            for index, (name, kind, count, training, layer_flops) in enumerate(
                zip(self.layer_names, self.layer_types, self.param_nums, self.training_modes, flops)
            )
        ]
        if self._in_sizes:
            header += ["In sizes", "Out sizes"]
            for row, in_size, out_size in zip(rows, self._in_sizes, self._out_sizes):
                row += [str(in_size), str(out_size)]
        return header, rows

    def totals(self) -> list[tuple[str, str]]:
        """(value, label) lines under the table: parameters, size, modes and operations."""
        trainable = self.trainable_parameters
        total = self.total_parameters
        modes = self.total_training_modes
        return [
            (human_count(trainable), "Trainable params"),
            (human_count(total - trainable), "Non-trainable params"),
            (human_count(total), "Total params"),
            (f"{self.model_size:,.3f}", "Total estimated model params size (MB)"),
            (str(modes["train"]), "Modules in train mode"),
            (str(modes["eval"]), "Modules in eval mode"),
            (human_count(self.total_flops), "Total Flops"),
        ]

    def __str__(self) -> str:
        header, rows = self.layer_table()
        lines = _table(header, rows) if rows else []
        lines += [f"{value:<10}{label}" for value, label in self.totals()]
        return "\n".join(lines)


UNKNOWN_SIZE = "?"


def _run_example(model: nn.Module, layers: list[nn.Module]) -> tuple[list[Any], list[Any], dict[str, dict[Any, int]]]:
    """Run `model` once on its `example_input_array` (no grad, eval mode, then its modes restored): each layer's
    input and output shapes, and the operations counted by module. Without an example, or without layers, there are
    no sizes and no counts."""
    example = getattr(model, "example_input_array", None)
    if example is None or not layers:
        return [], [], {}
    in_sizes: list[Any] = [UNKNOWN_SIZE] * len(layers)
    out_sizes: list[Any] = [UNKNOWN_SIZE] * len(layers)

    def recorder(index: int) -> Any:
        def record(_: nn.Module, inputs: Any, output: Any) -> None:
            in_sizes[index] = _shape(inputs[0] if isinstance(inputs, tuple) and len(inputs) == 1 else inputs)
            out_sizes[index] = _shape(output)

        return record

    handles = [layer.register_forward_hook(recorder(index)) for index, layer in enumerate(layers)]
    modes = {name: m.training for name, m in model.named_modules()}
    device = next((p.device for p in model.parameters() if not _is_uninitialized(p)), torch.device("cpu"))
    example = move_to_device(example, device)
    counter = FlopCounterMode(display=False)
    try:
        model.eval()
        with torch.no_grad(), counter:
            if isinstance(example, tuple | list):
                model(*example)
            elif isinstance(example, dict):
                model(**example)
            else:
                model(example)
    finally:
        for handle in handles:
            handle.remove()
        for name, module in model.named_modules():
            module.training = modes.get(name, module.training)
    return in_sizes, out_sizes, counter.get_flop_counts()


def _shape(value: Any) -> Any:
    """A tensor's shape as a list; a sequence of tensors as a list of shapes; anything else is unknown."""
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, tuple | list):
        return [_shape(item) for item in value]
    return UNKNOWN_SIZE


def human_count(number: int) -> str:
    """1234 -> "1.2 K", 123456 -> "123 K", 12 -> "12"."""
    scaled = float(number)
    unit = 0
    while abs(scaled) >= 1000 and unit < len(_UNITS) - 1:
        scaled /= 1000
        unit += 1
    if unit == 0:
        return str(number)
    return f"{scaled:.1f}{_UNITS[unit]}" if abs(scaled) < 100 else f"{scaled:.0f}{_UNITS[unit]}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[col]) for row in [header, *rows]) for col in range(len(header))]

    def render(cells: list[str]) -> str:
        return " | ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

    rule = "-" * len(" | ".join(" " * width for width in widths))
    return [render(header), rule, *(render(row) for row in rows), rule]


def _count(params: Any) -> int:
    # lazy modules hold parameters without a shape until their first forward; they count as zero
    return sum(p.numel() for p in params if not _is_uninitialized(p))


def _is_uninitialized(param: torch.Tensor) -> bool:
    return isinstance(param, nn.parameter.UninitializedParameter)


def _check_max_depth(max_depth: Any) -> None:
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
        raise ValueError(f"max_depth {max_depth!r} must be an int >= -1 (-1: all levels, 0: no summary)")
