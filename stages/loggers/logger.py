"""The Logger contract, the versioned log directory shared by the file loggers, and value conversions."""

from __future__ import annotations

import argparse
import functools
import importlib
import numbers
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import torch

from stages.rank_zero import rank_zero_only

FINALIZE_STATUSES = ("success", "failed", "finished")


class Logger(ABC):
    """What the trainer calls on a logger. Only global rank zero should call the logging methods."""

    @property
    @abstractmethod
    def name(self) -> str | None:
        """The experiment name: the folder under `save_dir` that groups this logger's versions."""

    @property
    @abstractmethod
    def version(self) -> int | str | None:
        """The run's version, shown as `v_num` in the progress bar."""

    @property
    def save_dir(self) -> str | None:
        """The directory the logger writes under; None for loggers that write nowhere local."""
        return None

    @property
    def root_dir(self) -> str | None:
        """`save_dir` joined with `name`: the parent of all versions."""
        return None

    @property
    def log_dir(self) -> str | None:
        """The directory of this run's files."""
        return None

    @property
    def experiment(self) -> Any:
        """The backend object (a writer, a run handle); None for loggers without one."""
        return None

    @abstractmethod
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record scalar metrics at `step`."""

    @abstractmethod
    def log_hyperparams(self, params: dict[str, Any] | argparse.Namespace) -> None:
        """Record the run's hyperparameters."""

    # log_graph, save, after_save_checkpoint and log_flow_artifacts are optional hooks: doing nothing is the right
    # default
    def log_graph(self, model: Any, input_array: Any = None) -> None:  # noqa: B027
        """Record the model's computational graph; called once per run, after the hyperparameters."""

    def save(self) -> None:  # noqa: B027
        """Persist anything buffered; loggers that buffer override it."""

    def finalize(self, status: str) -> None:
        """Called when a run ends; `status` is "success", "failed" or "finished" (preempted)."""
        check_finalize_status(status)
        self.save()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:  # noqa: B027
        """Called after a checkpoint callback saved a file; loggers that upload checkpoints override it."""

    def log_flow_artifacts(self, files: Mapping[str, bytes]) -> None:  # noqa: B027
        """Called on global rank zero as a run ends, before `finalize`, with the run's flow: `files` maps a file
        name to its content (the state-history dump `state-history.json`, its timeline as a Chrome trace
        `state-timeline.trace.json`, and the diagram of the path it took, `state-overlay.svg`, or
        `state-overlay.dot` where Graphviz is not installed). Trackers store them as
        artifacts of the run, so a failed run shows where it stopped."""


def check_finalize_status(status: str) -> None:
    if status not in FINALIZE_STATUSES:
        allowed = ", ".join(map(repr, FINALIZE_STATUSES))
        raise ValueError(f"finalize status {status!r} is not one of {allowed}")


def hparams_as_mapping(params: Mapping[str, Any] | argparse.Namespace) -> Mapping[str, Any]:
    if isinstance(params, argparse.Namespace):
        return vars(params)
    if not isinstance(params, Mapping):
        raise ValueError(
            f"hyperparameters must be a dict or an argparse.Namespace, got {type(params).__name__}: {params!r}"
        )
    return params


def flatten_hparams(params: Mapping[str, Any] | argparse.Namespace, delimiter: str = "/") -> dict[str, Any]:
    """Nested mappings and Namespaces become one level, keys joined by `delimiter` (`{"opt": {"lr": 1}}` ->
    `{"opt/lr": 1}`), because backends such as TensorBoard's hparams plugin only take flat key-value pairs."""
    flat: dict[str, Any] = {}
    for key, value in hparams_as_mapping(params).items():
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        if isinstance(value, Mapping):
            for sub_key, sub_value in flatten_hparams(value, delimiter).items():
                flat[f"{key}{delimiter}{sub_key}"] = sub_value
        else:
            flat[str(key)] = value
    return flat


def to_float(key: str, value: Any) -> float:
    """One metric value as a float: numbers, one-element tensors and numpy scalars are accepted."""
    if type(value) is float or type(value) is int:  # what the trainer sends, known without the numbers ABC's check
        return float(value)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"metric {key!r} is a tensor of shape {tuple(value.shape)}; only one-element tensors can be logged"
            )
        return float(value.item())
    if isinstance(value, numbers.Real):
        return float(value)
    # numpy scalars are not registered as numbers.Real in every numpy version, but all have item()
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "size", None) == 1 and isinstance(item(), numbers.Real):
        return float(item())
    raise ValueError(f"metric {key!r} has value {value!r}; only numbers and one-element tensors can be logged")


def metrics_to_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {key: to_float(key, value) for key, value in metrics.items()}


def add_prefix(metrics: dict[str, float], prefix: str, separator: str) -> dict[str, float]:
    if not prefix:
        return metrics
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()}


def check_prefix(prefix: Any) -> str:
    if not isinstance(prefix, str):
        raise ValueError(f"prefix {prefix!r} must be a str ('' for none)")
    return prefix


def import_tracker(module: str, extra: str, logger: str) -> ModuleType:
    """The tracker's client library, imported when the logger is made; missing, the error names the extra that
    installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ModuleNotFoundError(
            f"{logger} requires `{module}`, which is not installed: "
            f'pip install "statemachine-trainer[{extra}]" (or pip install {module.replace("_", "-")})'
        ) from err


def check_name_and_version(name: Any, version: Any) -> None:
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name {name!r} must be a str, or None or '' for no name folder")
    if isinstance(version, bool) or not isinstance(version, (int, str, type(None))):
        raise ValueError(f"version {version!r} must be a non-negative int, a folder name (str) or None")
    if isinstance(version, int) and version < 0:
        raise ValueError(f"version {version!r} must be a non-negative int, a folder name (str) or None")
    if version == "":
        raise ValueError("version '' is empty; give a folder name, a non-negative int, or None")


class VersionedDir:
    """`<save_dir>/<name>/<version>`: a str version is the folder name, an int N gives `version_N`, and None
    picks the next free N among the existing `version_*` folders, once, on first use."""

    def __init__(self, save_dir: str | os.PathLike[str], name: str | None, version: int | str | None) -> None:
        if not isinstance(save_dir, (str, os.PathLike)):
            raise ValueError(f"save_dir {save_dir!r} must be a str or os.PathLike naming a local directory")
        save_dir = os.fspath(save_dir)
        if "://" in save_dir:
            raise ValueError(f"save_dir {save_dir!r} is a URL; only local directories are supported")
        check_name_and_version(name, version)
        self.save_dir = os.path.expanduser(save_dir)
        self.name = name or ""
        self._version = version

    @property
    def root_dir(self) -> str:
        return os.path.join(self.save_dir, self.name) if self.name else self.save_dir

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = next_version(self.root_dir)
        return self._version

    @property
    def log_dir(self) -> str:
        version = self.version
        return os.path.join(self.root_dir, version if isinstance(version, str) else f"version_{version}")


def next_version(root_dir: str) -> int:
    """One more than the largest N among `root_dir/version_N` folders, 0 when there are none."""
    try:
        # scandir knows which entries are folders without a stat of each: a root of many runs stays cheap
        with os.scandir(root_dir) as entries:
            taken = [int(suffix) for entry in entries if (suffix := _version_suffix(entry)) is not None]
    except FileNotFoundError:
        return 0
    return max(taken) + 1 if taken else 0


def _version_suffix(entry: os.DirEntry[str]) -> str | None:
    """N of a `version_N` folder (a link to a folder counts), else None."""
    suffix = entry.name[len("version_") :]
    # isdigit alone admits non-ASCII digits such as "²", which int() rejects
    if entry.name.startswith("version_") and suffix.isascii() and suffix.isdigit() and entry.is_dir():
        return suffix
    return None


class FileLogger(Logger):
    """A logger writing under `<save_dir>/<name>/version_<N>`: the directory properties come from `self._dir`."""

    _dir: VersionedDir

    @property
    def name(self) -> str:
        return self._dir.name

    @property
    def version(self) -> int | str:
        return self._dir.version

    @property
    def save_dir(self) -> str:
        return self._dir.save_dir

    @property
    def root_dir(self) -> str:
        return self._dir.root_dir

    @property
    def log_dir(self) -> str:
        return self._dir.log_dir


class NoExperiment:
    """Accepts any call and does nothing, so `self.logger.experiment.add_image(...)` runs under fast_dev_run."""

    def __getattr__(self, name: str) -> Any:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> NoExperiment:
        return self


def rank_zero_experiment(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Decorates a logger's `experiment` property body: rank zero creates the backend object, every other rank
    gets an experiment whose methods accept any call and do nothing."""

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        if rank_zero_only.rank != 0:
            return NoExperiment()
        return fn(self)

    return experiment


class DummyLogger(Logger):
    """The logger `fast_dev_run` swaps in, as Lightning does: it records nothing and writes nothing."""

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    @property
    def experiment(self) -> NoExperiment:
        return NoExperiment()

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Nothing is recorded during a fast_dev_run."""

    def log_hyperparams(self, params: dict[str, Any] | argparse.Namespace) -> None:
        """Nothing is recorded during a fast_dev_run."""
