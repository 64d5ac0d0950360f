"""PyTorchProfiler: `torch.profiler` over the run, each trainer action a `record_function` range in the trace."""

from __future__ import annotations

import inspect
import os
import tempfile
from typing import Any

import torch

from statemachine.profilers.base import Profiler

_STEP_ACTIONS = (".training_step", ".validation_step", ".test_step", ".predict_step")


class PyTorchProfiler(Profiler):
    """Runs `torch.profiler.profile` from the first action to the end of the run.

    Every trainer action (hooks, steps, dataloader `next`) is a `record_function` range, and each module's
    forward is one too with `record_module_names=True`. `profiler.step()` follows every training, validation,
    test and predict step, so a `schedule=torch.profiler.schedule(...)` counts batches. Traces go to the log
    directory as chrome traces (`{stage}-{filename}.{n}.pt.trace.json`, which TensorBoard's profiler plugin
    also reads) unless `on_trace_ready` is given (for example `torch.profiler.tensorboard_trace_handler(dir)`).
    The report is `key_averages().table(...)`. Other keyword arguments go to `torch.profiler.profile`.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        group_by_input_shapes: bool = False,
        export_to_chrome: bool = True,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        record_module_names: bool = True,
        table_kwargs: dict[str, Any] | None = None,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        allowed = set(inspect.signature(torch.profiler.profile).parameters)
        unknown = sorted(set(profiler_kwargs) - allowed)
        if unknown:
            raise ValueError(
                f"PyTorchProfiler: unknown torch.profiler.profile arguments {unknown}; allowed: {sorted(allowed)}"
            )
        self.group_by_input_shapes = group_by_input_shapes or bool(profiler_kwargs.get("record_shapes"))
        if group_by_input_shapes:
            profiler_kwargs["record_shapes"] = True
        self.export_to_chrome = export_to_chrome
        self.row_limit = row_limit
        self.sort_by_key = sort_by_key
        self.record_module_names = record_module_names
        self.table_kwargs = dict(table_kwargs or {})
        self.profiler_kwargs = profiler_kwargs
        self.profiler: torch.profiler.profile | None = None
        self._ranges: dict[str, Any] = {}
        self._module_hooks: list[Any] = []
        self._recording = False

    def start(self, action_name: str) -> None:
        if self.profiler is None:
            self._start_profiler()
        record = torch.profiler.record_function(action_name)
        record.__enter__()
        self._ranges[action_name] = record

    def stop(self, action_name: str) -> None:
        record = self._ranges.pop(action_name, None)
        if record is None:
            raise ValueError(f"action {action_name!r} was stopped but never started")
        record.__exit__(None, None, None)
        if self.profiler is not None and action_name.endswith(_STEP_ACTIONS):
            self.profiler.step()

    def summary(self) -> str:
        if self.profiler is None:
            return ""
        self._stop_profiler()
        events = self.profiler.key_averages(group_by_input_shape=self.group_by_input_shapes)
        cuda = torch.profiler.ProfilerActivity.CUDA in self.profiler.activities
        sort_by = self.sort_by_key or ("device_time_total" if cuda else "cpu_time_total")
        table = events.table(sort_by=sort_by, row_limit=self.row_limit, **self.table_kwargs)
        return f"{self._title()}\n\n{table}"

    def teardown(self, stage: str | None) -> None:
        if self.profiler is not None:
            self._stop_profiler()
            self.profiler = None
        super().teardown(stage)

    def _start_profiler(self) -> None:
        options = dict(self.profiler_kwargs)
        if "on_trace_ready" not in options and self.export_to_chrome:
            options["on_trace_ready"] = self._export_chrome_trace
        self.profiler = torch.profiler.profile(**options)
        self.profiler.start()
        self._recording = True
        if self.record_module_names and self._lightning_module is not None:
            self._record_module_forwards(self._lightning_module)

    def _stop_profiler(self) -> None:
        for record in reversed(list(self._ranges.values())):
            record.__exit__(None, None, None)
        self._ranges.clear()
        for handle in self._module_hooks:
            handle.remove()
        self._module_hooks.clear()
        if self._recording and self.profiler is not None:
            self._recording = False
            self.profiler.stop()

    def _record_module_forwards(self, module: torch.nn.Module) -> None:
        """A `[module]name: Type` range around every submodule's forward."""
        open_ranges: dict[int, list[Any]] = {}

        def enter(name: str) -> Any:
            def hook(submodule: torch.nn.Module, _inputs: Any) -> None:
                record = torch.profiler.record_function(f"[module]{name}: {type(submodule).__name__}")
                record.__enter__()
                open_ranges.setdefault(id(submodule), []).append(record)

            return hook

        def leave(submodule: torch.nn.Module, _inputs: Any, _output: Any) -> None:
            stack = open_ranges.get(id(submodule))
            if stack:
                stack.pop().__exit__(None, None, None)

        for name, submodule in module.named_modules():
            if name:
                self._module_hooks.append(submodule.register_forward_pre_hook(enter(name)))
                self._module_hooks.append(submodule.register_forward_hook(leave))

    def _why_no_trace_files(self) -> str:
        if "on_trace_ready" in self.profiler_kwargs:
            return (
                "PyTorchProfiler hands its traces to your on_trace_ready and lists none; merge the files your "
                "handler wrote with `python -m statemachine.history trace DUMP --profile FILE`"
            )
        if not self.export_to_chrome:
            return "PyTorchProfiler(export_to_chrome=False) writes no chrome trace; leave export_to_chrome=True"
        return (
            "PyTorchProfiler has exported no chrome trace yet: it exports one when a run (or a schedule's cycle) ends"
        )

    def _export_chrome_trace(self, profiler: torch.profiler.profile) -> None:
        """Write the finished trace through fsspec: torch writes local files only, so go through a temp file."""
        with tempfile.TemporaryDirectory() as scratch:
            local = os.path.join(scratch, "trace.json")
            profiler.export_chrome_trace(local)
            with open(local, "rb") as stream:
                self._write_trace(stream.read(), ".pt.trace.json")
