"""TensorBoard logger: scalars and the hparams plugin's data, written by torch's SummaryWriter (its event file
written in the caller's thread: see `stages.loggers.event_file`)."""

from __future__ import annotations

import argparse
import numbers
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from stages.loggers.graph import graph_input
from stages.loggers.logger import (
    FileLogger,
    NoExperiment,
    VersionedDir,
    add_prefix,
    check_finalize_status,
    check_prefix,
    flatten_hparams,
    hparams_as_mapping,
    metrics_to_floats,
    rank_zero_experiment,
)
from stages.module import tracing
from stages.rank_zero import rank_zero_only
from stages.saving import save_hparams_to_yaml

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class TensorBoardLogger(FileLogger):
    """Writes to `<save_dir>/<name>/version_<N>[/<sub_dir>]`; the SummaryWriter (and with it the tensorboard
    import) is created on first use so that importing the package stays fast."""

    PREFIX_SEPARATOR = "-"
    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not isinstance(log_graph, bool):
            raise ValueError(f"log_graph {log_graph!r} must be a bool")
        if not isinstance(default_hp_metric, bool):
            raise ValueError(f"default_hp_metric {default_hp_metric!r} must be a bool")
        if sub_dir is not None and not isinstance(sub_dir, (str, os.PathLike)):
            raise ValueError(f"sub_dir {sub_dir!r} must be a str, an os.PathLike or None")
        self._dir = VersionedDir(save_dir, name, version)
        self._default_hp_metric = default_hp_metric
        self._log_graph = log_graph
        self._prefix = check_prefix(prefix)
        self._sub_dir = os.fspath(sub_dir) if sub_dir is not None else None
        self._experiment: SummaryWriter | None = None
        self.hparams: dict[str, Any] = {}
        # Once hparams.yaml is there, a save only flushes: it runs at every logging step, and its two file checks
        # cost more than the flush there.
        self._hparams_file_written = False

    @property
    def log_dir(self) -> str:
        log_dir = self._dir.log_dir
        return os.path.join(log_dir, self._sub_dir) if self._sub_dir else log_dir

    @property
    def sub_dir(self) -> str | None:
        return self._sub_dir

    @property
    @rank_zero_experiment
    def experiment(self) -> SummaryWriter | NoExperiment:
        if self._experiment is None:
            from stages.loggers.event_file import SynchronousSummaryWriter

            self._experiment = SynchronousSummaryWriter(log_dir=self.log_dir)
        return self._experiment

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        scalars = add_prefix(metrics_to_floats(metrics), self._prefix, self.PREFIX_SEPARATOR)
        # One event holds the step's scalars: the records add_scalar would write one by one, in one record.
        values = [Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()]
        self.experiment._get_file_writer().add_summary(Summary(value=values), step)

    @rank_zero_only
    def log_hyperparams(
        self,
        params: dict[str, Any] | argparse.Namespace,
        metrics: dict[str, float] | float | None = None,
    ) -> None:
        """Writes the hparams plugin's data; `metrics` (a dict, or one number for `hp_metric`) are the values
        the hparams dashboard shows against these hyperparameters. Without them, `default_hp_metric` logs
        `hp_metric` = -1 so the dashboard has a column to fill in later with `self.log("hp_metric", ...)`."""
        from torch.utils.tensorboard.summary import hparams

        self.hparams.update(hparams_as_mapping(params))
        flat = _sanitize_for_tensorboard(flatten_hparams(params))
        if metrics is None:
            metrics = {"hp_metric": -1.0} if self._default_hp_metric else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        # prefixed before both writes, so the plugin's metric names match the scalar tags
        scalars = add_prefix(metrics_to_floats(metrics), self._prefix, self.PREFIX_SEPARATOR)
        for tag, value in scalars.items():
            self.experiment.add_scalar(tag, value, 0)
        experiment_summary, session_start, session_end = hparams(flat, scalars)
        # _get_file_writer reopens the event file if finalize() closed it (fit, then test with one logger)
        file_writer = self.experiment._get_file_writer()
        for summary in (experiment_summary, session_start, session_end):
            file_writer.add_summary(summary)

    @rank_zero_only
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """With `log_graph=True`, the graph of `model.forward` traced on `input_array` (by default the model's
        `example_input_array`); a warning says why when there is no input that can be traced."""
        if not self._log_graph:
            return
        example = graph_input(model, input_array)
        if example is not None:
            with tracing(model):
                self.experiment.add_graph(model, example)

    @rank_zero_only
    def save(self) -> None:
        """Flush the event file, and write `hparams.yaml` into the log directory once it exists (the file is
        what `load_from_checkpoint(hparams_file=...)` reads)."""
        if self._experiment is not None:
            self._experiment.flush()
        if self._hparams_file_written:
            return
        log_dir = self.log_dir
        hparams_file = os.path.join(log_dir, self.NAME_HPARAMS_FILE)
        if not os.path.isdir(log_dir):
            return
        if not os.path.isfile(hparams_file):
            save_hparams_to_yaml(hparams_file, self.hparams)
        self._hparams_file_written = True

    @rank_zero_only
    def finalize(self, status: str) -> None:
        check_finalize_status(status)
        if self._experiment is not None:
            self._experiment.flush()
            self._experiment.close()
        if status == "success":
            self.save()


def _sanitize_for_tensorboard(params: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """The hparams plugin takes only bool, number and str values; anything else is shown as its str."""
    clean: dict[str, bool | int | float | str] = {}
    for key, value in params.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, (bool, str)):
            clean[key] = value
        elif isinstance(value, numbers.Integral):
            clean[key] = int(value)
        elif isinstance(value, numbers.Real):
            clean[key] = float(value)
        else:
            clean[key] = str(value)
    return clean
