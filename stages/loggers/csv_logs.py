"""CSV logger: metrics to `metrics.csv`, hyperparameters to `hparams.yaml`, on any fsspec filesystem.

A local file is replaced atomically whenever its header or content changes as a whole; new metric rows under the
same header are appended."""

from __future__ import annotations

import argparse
import csv
import io
import os
import tempfile
import warnings
from collections.abc import Mapping
from typing import Any

import fsspec
import torch
from fsspec.implementations.local import LocalFileSystem

from stages.exceptions import TrainerWarning
from stages.loggers.logger import (
    FileLogger,
    NoExperiment,
    VersionedDir,
    check_finalize_status,
    check_name_and_version,
    check_prefix,
    hparams_as_mapping,
    rank_zero_experiment,
)
from stages.rank_zero import rank_zero_only
from stages.saving import hparams_yaml


class CSVLogger(FileLogger):
    """Writes `<save_dir>/<name>/version_<N>/metrics.csv` (one column per key, `step` among them, sorted) and
    `hparams.yaml`. `save_dir` may be a local path or an fsspec URL (`s3://...`, `memory://...`). Rows are
    buffered and written every `flush_logs_every_n_steps` steps and on save."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if (
            isinstance(flush_logs_every_n_steps, bool)
            or not isinstance(flush_logs_every_n_steps, int)
            or flush_logs_every_n_steps < 1
        ):
            raise ValueError(f"flush_logs_every_n_steps {flush_logs_every_n_steps!r} must be an int >= 1")
        self._dir = FsspecVersionedDir(save_dir, name, version)
        self._fs = self._dir.fs
        self._prefix = check_prefix(prefix)
        self._flush_logs_every_n_steps = flush_logs_every_n_steps
        self._experiment: ExperimentWriter | None = None

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter | NoExperiment:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ExperimentWriter(self.log_dir)
        return self._experiment

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if self._prefix:
            metrics = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}": value for key, value in metrics.items()}
        writer = self.experiment
        if step is None:
            # Lightning's count: the rows not yet saved, so it restarts after each save.
            step = len(writer.metrics)
        writer.log_metrics(metrics, step)
        if (step + 1) % self._flush_logs_every_n_steps == 0:
            self.save()

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | argparse.Namespace | None = None) -> None:
        self.experiment.log_hparams({} if params is None else params)

    @rank_zero_only
    def save(self) -> None:
        self.experiment.save()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        check_finalize_status(status)
        # A process that never logged (the launcher of spawned workers) has nothing to write.
        if self._experiment is not None:
            self.save()


class FsspecVersionedDir(VersionedDir):
    """`<save_dir>/<name>/<version>` on the filesystem of `save_dir`, which is kept as given (a URL stays one)."""

    def __init__(self, save_dir: str | os.PathLike[str], name: str | None, version: int | str | None) -> None:
        if not isinstance(save_dir, (str, os.PathLike)):
            raise ValueError(f"save_dir {save_dir!r} must be a str or os.PathLike naming a directory or URL")
        check_name_and_version(name, version)
        self.save_dir = os.fspath(save_dir)
        self.name = name or ""
        self._version = version
        self.fs: fsspec.AbstractFileSystem = fsspec.core.url_to_fs(self.save_dir)[0]

    @property
    def root_dir(self) -> str:
        return os.path.join(self.save_dir, self.name)

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = self._next_version()
        return self._version

    def _next_version(self) -> int:
        """One more than the largest N among the `version_N` folders of `root_dir`, 0 when there are none."""
        if not self.fs.isdir(self.root_dir):
            return 0
        taken = []
        for entry in self.fs.ls(self.root_dir, detail=True):
            folder = os.path.basename(entry["name"].rstrip("/"))
            suffix = folder[len("version_") :]
            # isdigit alone admits non-ASCII digits such as "²", which int() rejects
            if entry["type"] == "directory" and folder.startswith("version_") and suffix.isascii() and suffix.isdigit():
                taken.append(int(suffix))
        return max(taken) + 1 if taken else 0


class ExperimentWriter:
    """The CSVLogger's experiment: buffers metric rows (`metrics`) and owns the two files of one log directory."""

    NAME_METRICS_FILE = "metrics.csv"
    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(self, log_dir: str) -> None:
        self.metrics: list[dict[str, Any]] = []
        # every column of the file on disk, "step" among them, sorted
        self.metrics_keys: list[str] = []
        self.hparams: dict[str, Any] = {}
        self._fs: fsspec.AbstractFileSystem = fsspec.core.url_to_fs(log_dir)[0]
        self.log_dir = log_dir
        self.metrics_file_path = os.path.join(log_dir, self.NAME_METRICS_FILE)
        # A metrics file found in the folder is an earlier run's: the first save replaces it.
        self._file_written = False
        self._warn_if_log_dir_not_empty()
        self._fs.makedirs(log_dir, exist_ok=True)

    def log_metrics(self, metrics_dict: Mapping[str, Any], step: int | None = None) -> None:
        if step is None:
            step = len(self.metrics)
        row = {key: value.item() if isinstance(value, torch.Tensor) else value for key, value in metrics_dict.items()}
        row["step"] = step
        self.metrics.append(row)

    def log_hparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        self.hparams.update(hparams_as_mapping(params))
        self._replace(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), hparams_yaml(self.hparams))

    def save(self) -> None:
        if not self.metrics:
            return
        rows, self.metrics = self.metrics, []
        new_keys = set().union(*rows).difference(self.metrics_keys)
        if new_keys or not self._file_written:
            # the header changes, so every earlier row is rewritten under the union of the keys
            earlier = self._read_rows() if self._file_written else []
            self.metrics_keys = sorted(new_keys.union(self.metrics_keys))
            self._replace(self.metrics_file_path, self._csv(earlier + rows, header=True))
            self._file_written = True
        else:
            # Appended, not rewritten: a save costs the new rows, not the whole file (a long run saves thousands of
            # times). The rows go out in one write, so earlier rows are never touched and a crash can cut at most
            # the last line short.
            with self._fs.open(self.metrics_file_path, "a", newline="") as out:
                out.write(self._csv(rows, header=False))

    def _warn_if_log_dir_not_empty(self) -> None:
        if self._fs.isdir(self.log_dir) and self._fs.ls(self.log_dir):
            warnings.warn(
                f"Experiment logs directory {self.log_dir} exists and is not empty. Previous log files in this"
                " directory will be deleted when the new ones are saved!",
                TrainerWarning,
                stacklevel=4,
            )

    def _read_rows(self) -> list[dict[str, Any]]:
        with self._fs.open(self.metrics_file_path, "r", newline="") as existing:
            return list(csv.DictReader(existing))

    def _csv(self, rows: list[dict[str, Any]], header: bool) -> str:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.metrics_keys, restval="")
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return text.getvalue()

    def _replace(self, path: str, text: str) -> None:
        """A reader or a crash never sees half of `path`: local files go through a renamed temporary, and an
        object store shows an upload only once it is complete."""
        if not isinstance(self._fs, LocalFileSystem):
            with self._fs.open(path, "w", newline="") as out:
                out.write(text)
            return
        directory, base = os.path.split(fsspec.core.url_to_fs(path)[1])
        fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=f".{base}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", newline="") as out:
                out.write(text)
            os.replace(tmp_path, os.path.join(directory, base))
        except BaseException:
            os.unlink(tmp_path)
            raise
