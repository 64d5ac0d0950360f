"""Comet logger: metrics, hyperparameters, the model graph and the run's flow, in one Comet experiment started by
`comet_ml.start`, online or as an offline archive."""

from __future__ import annotations

import argparse
import inspect
import os
from collections.abc import Mapping
from typing import Any

import torch

from stages.loggers.logger import (
    Logger,
    check_finalize_status,
    flatten_hparams,
    hparams_as_mapping,
    import_tracker,
    metrics_to_floats,
    rank_zero_experiment,
)
from stages.rank_zero import rank_zero_only

START_MODES = ("get_or_create", "create", "get")
# Lightning's names from before its Comet logger moved to comet_ml.start; refused with the name that replaced them,
# because taking them silently would keep two spellings of one option alive.
_RENAMED = {
    "experiment_name": "name=...",
    "project_name": "project=...",
    "save_dir": "offline_directory=...",
    "offline": "online=False",
}


class CometLogger(Logger):
    """Logs to one Comet experiment, created on global rank zero when the logger is made (other ranks get an
    experiment that accepts any call and does nothing).

    `online=False` keeps the experiment in an offline archive (a zip under `offline_directory`, no API key needed)
    that `comet upload` sends later; Comet writes the archive when the experiment ends, which is when the process
    exits or when `logger.experiment.end()` is called. `finalize` only flushes, so the same experiment keeps
    receiving data after `fit` (a following `test`, or `logger.experiment.log_*` calls).

    Arguments left None come from Comet's own configuration (`COMET_API_KEY`, `COMET_WORKSPACE`,
    `COMET_PROJECT_NAME`, `COMET_EXPERIMENT_KEY`, `COMET_START_MODE`, `COMET_START_ONLINE`, the `.comet.config`
    file); the other keyword arguments (`name`, `tags`, `offline_directory`, `log_code`, ...) are
    `comet_ml.ExperimentConfig`'s options.
    """

    FRAMEWORK = "statemachine-trainer"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        workspace: str | None = None,
        project: str | None = None,
        experiment_key: str | None = None,
        mode: str | None = None,
        online: bool | None = None,
        prefix: str | None = None,
        **kwargs: Any,
    ) -> None:
        _check_arguments(api_key, workspace, project, experiment_key, mode, online, prefix)
        _refuse_renamed(kwargs)
        # Comet patches the ML libraries imported after it to log on its own; the trainer logs everything itself,
        # so that would record each value twice. Read when comet_ml is first imported.
        os.environ.setdefault("COMET_DISABLE_AUTO_LOGGING", "1")
        comet_ml = import_tracker("comet_ml", "comet", "CometLogger")
        _refuse_unknown_options(comet_ml.ExperimentConfig, kwargs)
        self._api_key = api_key
        self._workspace = workspace
        self._project = project
        self._experiment_key = experiment_key
        self._mode = mode
        self._online = online
        # comet_ml joins a prefix to each name with "_"; an empty one would give "_loss", so it means no prefix
        self._prefix = prefix or None
        self._comet_config = comet_ml.ExperimentConfig(**kwargs)
        self._experiment: Any = None
        if rank_zero_only.rank == 0:
            self._create_experiment()

    def _create_experiment(self) -> None:
        import comet_ml

        self._experiment = comet_ml.start(
            api_key=self._api_key,
            workspace=self._workspace,
            project_name=self._project,
            experiment_key=self._experiment_key,
            mode=self._mode,
            online=self._online,
            source=self.FRAMEWORK,
            experiment_config=self._comet_config,
        )
        self._experiment_key = self._experiment.get_key()
        self._project = self._experiment.project_name

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The `comet_ml` experiment (an `OfflineExperiment` with `online=False`); `self.logger.experiment.
        log_image(...)` and the rest of Comet's API work on it. A logger unpickled in a spawned process starts it
        again here, under the same experiment key."""
        if self._experiment is None:
            self._create_experiment()
        return self._experiment

    @property
    def name(self) -> str | None:
        """The project name: the given one, or once the experiment exists, the one Comet resolved."""
        return self._project

    @property
    def version(self) -> str | None:
        """The experiment key, once the experiment exists (on global rank zero)."""
        if self._experiment is None:
            return None
        key: str = self._experiment.get_key()
        return key

    @property
    def save_dir(self) -> str | None:
        """The offline directory: the option, Comet's configuration (`COMET_OFFLINE_DIRECTORY`) or Comet's default
        `.cometml-runs`, online too; ModelCheckpoint saves under `<save_dir>/<name>/<version>/checkpoints`."""
        directory: str | None = self._comet_config.offline_directory
        return directory

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | argparse.Namespace) -> None:
        """Nested mappings become parameters named `outer|inner`, as Comet shows nested parameters."""
        self.experiment.__internal_api__log_parameters__(
            parameters=dict(hparams_as_mapping(params)),
            framework=self.FRAMEWORK,
            flatten_nested=True,
            source="manual",
        )

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """An `epoch` entry is no metric: it becomes the epoch of the metrics logged with it (and after it, until
        the next one). Nested mappings give names joined by "/"; without `step`, Comet's current step is used."""
        values = dict(metrics)
        epoch = values.pop("epoch", None)
        if isinstance(epoch, torch.Tensor):
            epoch = epoch.item()
        self.experiment.__internal_api__log_metrics__(
            metrics_to_floats(flatten_hparams(values, delimiter="/")),
            step=step,
            epoch=epoch,
            prefix=self._prefix,
            framework=self.FRAMEWORK,
        )

    @rank_zero_only
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """The module's printed structure becomes the experiment's model graph; no input is traced."""
        self.experiment.__internal_api__set_model_graph__(graph=model, framework=self.FRAMEWORK)

    @rank_zero_only
    def log_flow_artifacts(self, files: Mapping[str, bytes]) -> None:
        """Each file becomes an asset of the experiment under its own name; a second run with this logger adds
        its files next to the first run's."""
        for file_name, content in files.items():
            self.experiment.log_asset_data(content, name=file_name)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Flushes and leaves the experiment running, whatever the status, so it can still be used after the run.
        A failure that propagates out of the script is recorded by Comet as the experiment's crash."""
        check_finalize_status(status)
        if self._experiment is not None:
            self._experiment.flush()

    def __getstate__(self) -> dict[str, Any]:
        # The experiment holds threads and files; a spawned process reconnects to it by its key.
        state = self.__dict__.copy()
        if self._experiment is not None:
            state["_experiment_key"] = self._experiment.get_key()
        state["_experiment"] = None
        return state


def _check_arguments(
    api_key: Any, workspace: Any, project: Any, experiment_key: Any, mode: Any, online: Any, prefix: Any
) -> None:
    named = {"api_key": api_key, "workspace": workspace, "project": project, "experiment_key": experiment_key}
    for argument, value in {**named, "prefix": prefix}.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"CometLogger: {argument} {value!r} must be a str or None")
    if mode is not None and mode not in START_MODES:
        raise ValueError(
            f"CometLogger: Unsupported experiment start mode: {mode!r}, you should use any of {list(START_MODES)} "
            "(an offline experiment is online=False)"
        )
    if online is not None and not isinstance(online, bool):
        raise ValueError(
            f"CometLogger: online {online!r} must be True, False or None (None: Comet's configuration decides, "
            "online unless COMET_START_ONLINE says otherwise)"
        )


def _refuse_renamed(kwargs: Mapping[str, Any]) -> None:
    for old, new in _RENAMED.items():
        if old in kwargs:
            raise ValueError(f"CometLogger: `{old}` was renamed; pass {new} instead")


def _refuse_unknown_options(experiment_config: Any, kwargs: Mapping[str, Any]) -> None:
    options = list(inspect.signature(experiment_config).parameters)
    unknown = sorted(set(kwargs).difference(options))
    if unknown:
        raise TypeError(
            f"CometLogger got an unexpected keyword argument {unknown[0]!r}"
            + (f" (and {unknown[1:]})" if len(unknown) > 1 else "")
            + f"; besides its own arguments it takes comet_ml.ExperimentConfig's options: {', '.join(options)}"
        )
