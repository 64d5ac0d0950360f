"""CSV logger: metrics to `metrics.csv`, hyperparameters to `hparams.yaml`.

A file is replaced atomically whenever its header or content changes as a whole; new metric rows under the same
header are appended."""

from __future__ import annotations

import argparse
import csv
import io
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping
from typing import IO, Any

from stages.exceptions import TrainerWarning
from stages.loggers.logger import (
    FileLogger,
    NoExperiment,
    VersionedDir,
    add_prefix,
    check_prefix,
    hparams_as_mapping,
    metrics_to_floats,
    rank_zero_experiment,
)
from stages.rank_zero import rank_zero_only
from stages.saving import hparams_yaml

METRICS_FILE = "metrics.csv"
HPARAMS_FILE = "hparams.yaml"


class CSVLogger(FileLogger):
    """Writes `<save_dir>/<name>/version_<N>/metrics.csv` (a `step` column, then one column per metric key)
    and `hparams.yaml`. Rows are buffered and written every `flush_logs_every_n_steps` steps and on save."""

    PREFIX_SEPARATOR = "-"

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
        self._dir = VersionedDir(save_dir, name, version)
        self._prefix = check_prefix(prefix)
        self._flush_every = flush_logs_every_n_steps
        self._experiment: CSVWriter | None = None

    @property
    @rank_zero_experiment
    def experiment(self) -> CSVWriter | NoExperiment:
        if self._experiment is None:
            self._experiment = CSVWriter(self.log_dir)
        return self._experiment

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        writer = self.experiment
        if step is None:
            step = writer.rows_logged
        writer.log_metrics(add_prefix(metrics_to_floats(metrics), self._prefix, self.PREFIX_SEPARATOR), step)
        if (step + 1) % self._flush_every == 0:
            writer.save()

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | argparse.Namespace) -> None:
        self.experiment.log_hparams(params)

    @rank_zero_only
    def save(self) -> None:
        if self._experiment is not None:
            self._experiment.save()


class CSVWriter:
    """The CSVLogger's experiment: buffers rows and owns the two files of one log directory."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.metrics_file = os.path.join(log_dir, METRICS_FILE)
        self.hparams_file = os.path.join(log_dir, HPARAMS_FILE)
        self.hparams: dict[str, Any] = {}
        self.rows_logged = 0
        # the metric columns of the file on disk, "step" excluded
        self._columns: list[str] = []
        self._file_written = False
        self._pending: list[dict[str, float | int]] = []
        if os.path.isfile(self.metrics_file):
            warnings.warn(
                f"{self.metrics_file} already exists; it will be replaced when this run first saves its metrics",
                TrainerWarning,
                stacklevel=3,
            )
        os.makedirs(log_dir, exist_ok=True)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._pending.append({"step": step, **metrics})
        self.rows_logged += 1

    def log_hparams(self, params: Mapping[str, Any] | argparse.Namespace) -> None:
        self.hparams.update(hparams_as_mapping(params))
        text = hparams_yaml(self.hparams)
        _atomic_write(self.hparams_file, lambda out: out.write(text))

    def save(self) -> None:
        if not self._pending:
            return
        seen = {key for row in self._pending for key in row if key != "step"}
        new_keys = seen.difference(self._columns)
        rows, self._pending = self._pending, []
        if new_keys or not self._file_written:
            # the header changes, so every earlier row is rewritten under the union of the keys
            old_rows = self._read_rows() if self._file_written else []
            self._columns = sorted(new_keys.union(self._columns))
            _atomic_write(self.metrics_file, lambda out: self._write_rows(out, old_rows + rows, header=True))
            self._file_written = True
        else:
            # Appended, not rewritten: a save costs the new rows, not the whole file (a long run saves thousands of
            # times). The rows go out in one write, so earlier rows are never touched and a crash can cut at most
            # the last line short.
            text = io.StringIO(newline="")
            self._write_rows(text, rows, header=False)
            with open(self.metrics_file, "a", newline="") as out:
                out.write(text.getvalue())

    def _read_rows(self) -> list[dict[str, Any]]:
        with open(self.metrics_file, newline="") as existing:
            return list(csv.DictReader(existing))

    def _write_rows(self, out: IO[str], rows: list[dict[str, Any]], header: bool) -> None:
        writer = csv.DictWriter(out, fieldnames=["step", *self._columns], restval="")
        if header:
            writer.writeheader()
        writer.writerows(rows)


def _atomic_write(path: str, write: Callable[[IO[str]], Any]) -> None:
    """Writes through a temporary file in the same directory, then renames it over `path`, so a reader or a
    crash never sees a half-written file."""
    directory, base = os.path.split(path)
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=f".{base}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as out:
            write(out)
        os.replace(tmp_path, path)
    except BaseException:
        os.unlink(tmp_path)
        raise
