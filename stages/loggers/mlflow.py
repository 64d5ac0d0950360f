"""MLflow logger: metrics, parameters, tags, checkpoints and the run's flow on an MLflow tracking server (or a
local `file:` store), through `MlflowClient`. The run is created on first use, on global rank zero only."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import yaml

from stages.loggers.checkpoints import checkpoint_settings, checkpoints_to_upload
from stages.loggers.logger import (
    Logger,
    NoExperiment,
    add_prefix,
    check_finalize_status,
    check_prefix,
    flatten_hparams,
    import_tracker,
    rank_zero_experiment,
    to_float,
)
from stages.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

_log = logging.getLogger(__name__)

LOCAL_FILE_URI_PREFIX = "file:"
# MLflow takes at most 100 parameters per request; Lightning keeps 250 characters of each value
_PARAMS_PER_BATCH = 100
_PARAM_VALUE_LENGTH = 250
_METRIC_NAME_REFUSED = re.compile(r"[^a-zA-Z0-9_/. -]+")
_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}
FLOW_ARTIFACT_PATH = "statemachine"


class MLFlowLogger(Logger):
    """Logs to MLflow. `tracking_uri` defaults to `MLFLOW_TRACKING_URI`, else to `file:<save_dir>`; `name` is
    the experiment's id and `version` the run's id. With `log_model=True` the checkpoints are uploaded when the
    run ends (during training when `save_top_k == -1`), with `"all"` at every save."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: dict[str, Any] | None = None,
        save_dir: str | None = "./mlruns",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
        checkpoint_path_prefix: str = "",
    ) -> None:
        mlflow = import_tracker("mlflow", "mlflow", "MLFlowLogger")
        if not (isinstance(log_model, bool) or log_model == "all"):
            raise ValueError(f"log_model {log_model!r} must be True, False or 'all'")
        if tags is not None and not isinstance(tags, Mapping):
            raise ValueError(f"tags {tags!r} must be a dict of tag names to values, or None")
        if synchronous is not None and not isinstance(synchronous, bool):
            raise ValueError(f"synchronous {synchronous!r} must be a bool or None")
        if not isinstance(checkpoint_path_prefix, str):
            raise ValueError(f"checkpoint_path_prefix {checkpoint_path_prefix!r} must be a str ('' for none)")
        tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"{LOCAL_FILE_URI_PREFIX}{save_dir}"
        self._experiment_name = experiment_name
        self._experiment_id: str | None = None
        self._tracking_uri = tracking_uri
        self._run_name = run_name
        self._run_id = run_id
        self.tags = dict(tags) if tags is not None else None
        self._log_model = log_model
        self._prefix = check_prefix(prefix)
        self._artifact_location = artifact_location
        self._synchronous = synchronous
        self._checkpoint_path_prefix = checkpoint_path_prefix
        self._checkpoint_callback: Any = None
        self._uploaded: dict[str, float] = {}
        self._initialized = False
        self._mlflow_client: MlflowClient = mlflow.tracking.MlflowClient(tracking_uri)

    @property
    @rank_zero_experiment
    def experiment(self) -> MlflowClient | NoExperiment:
        """The `MlflowClient`; the experiment and the run are created on first use."""
        if not self._initialized:
            self._start()
        return self._mlflow_client

    def _start(self) -> None:
        import mlflow
        from mlflow.tracking.context.registry import resolve_tags
        from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

        client = self._mlflow_client
        mlflow.set_tracking_uri(self._tracking_uri)
        if self._run_id is not None:
            self._experiment_id = client.get_run(self._run_id).info.experiment_id
            self._initialized = True
            return
        found = client.get_experiment_by_name(self._experiment_name)
        if found is not None and found.lifecycle_stage != "deleted":
            self._experiment_id = found.experiment_id
        else:
            _log.warning("Experiment with name %s not found. Creating it.", self._experiment_name)
            self._experiment_id = client.create_experiment(
                name=self._experiment_name, artifact_location=self._artifact_location
            )
        if self._run_name is not None:
            self.tags = self.tags or {}
            if MLFLOW_RUN_NAME in self.tags:
                _log.warning(
                    "The tag %s is found in tags. The value will be overridden by %s.", MLFLOW_RUN_NAME, self._run_name
                )
            self.tags[MLFLOW_RUN_NAME] = self._run_name
        run = client.create_run(experiment_id=self._experiment_id, tags=resolve_tags(self.tags))
        self._run_id = run.info.run_id
        self._initialized = True

    @property
    def run_id(self) -> str | None:
        """The run's id (the run is created if it does not exist yet)."""
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        """The experiment's id (the experiment is created if it does not exist yet)."""
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str | None:
        return self.experiment_id

    @property
    def version(self) -> str | None:
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The local store's directory for a `file:` tracking URI; None for a server."""
        if self._tracking_uri.startswith(LOCAL_FILE_URI_PREFIX):
            return self._tracking_uri[len(LOCAL_FILE_URI_PREFIX) :]
        return None

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | argparse.Namespace) -> None:
        from mlflow.entities import Param

        flat = flatten_hparams(params)
        entries = [Param(key=key, value=str(value)[:_PARAM_VALUE_LENGTH]) for key, value in flat.items()]
        for start in range(0, len(entries), _PARAMS_PER_BATCH):
            batch = entries[start : start + _PARAMS_PER_BATCH]
            client, run_id = self._active_run()
            client.log_batch(run_id=run_id, params=batch, synchronous=self._synchronous)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        from mlflow.entities import Metric

        timestamp_ms = int(time.time() * 1000)
        entries = []
        for key, value in add_prefix(dict(metrics), self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, str):
                _log.warning("Discarding metric with string value %s=%s.", key, value)
                continue
            metric = Metric(key=_metric_name(key), value=to_float(key, value), timestamp=timestamp_ms, step=step or 0)
            entries.append(metric)
        client, run_id = self._active_run()
        client.log_batch(run_id=run_id, metrics=entries, synchronous=self._synchronous)

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        """Uploads the checkpoints `log_model=True` kept for the end, then closes the run: FINISHED, FAILED, or
        KILLED when the run is shutting down after Ctrl-C."""
        check_finalize_status(status)
        if not self._initialized:
            return
        if self._checkpoint_callback is not None:
            self._upload_checkpoints(self._checkpoint_callback)
        client, run_id = self._active_run()
        client.set_terminated(run_id, _run_status(status))

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if self._log_model == "all" or self._log_model is True and checkpoint_callback.save_top_k == -1:
            self._upload_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callback = checkpoint_callback

    @rank_zero_only
    def log_flow_artifacts(self, files: Mapping[str, bytes]) -> None:
        """The run's state history and overlay diagram, under the run's `statemachine/` artifacts."""
        with tempfile.TemporaryDirectory() as folder:
            for name, data in files.items():
                with open(os.path.join(folder, name), "wb") as out:
                    out.write(data)
            client, run_id = self._active_run()
            client.log_artifacts(run_id, folder, FLOW_ARTIFACT_PATH)

    @rank_zero_only
    def _upload_checkpoints(self, checkpoint_callback: Any) -> None:
        """Each new checkpoint file goes under `<checkpoint_path_prefix>/<file stem>/`, with `metadata.yaml` (its
        score and the callback's settings) and `aliases.txt` ("latest", and "best" for the best model)."""
        client, run_id = self._active_run()
        for saved in checkpoints_to_upload(checkpoint_callback, self._uploaded):
            base = os.path.basename(saved.path)
            artifact_path = os.path.join(self._checkpoint_path_prefix, os.path.splitext(base)[0])
            client.log_artifact(run_id, saved.path, artifact_path)
            metadata = {
                "score": saved.score,
                "original_filename": base,
                "Checkpoint": checkpoint_settings(checkpoint_callback),
            }
            aliases = ["latest", "best"] if saved.is_best else ["latest"]
            with tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, "metadata.yaml"), "w") as out:
                    yaml.safe_dump(metadata, out, default_flow_style=False)
                with open(os.path.join(folder, "aliases.txt"), "w") as out:
                    out.write(str(aliases))
                client.log_artifacts(run_id, folder, artifact_path)
            self._uploaded[saved.path] = saved.modified

    def _active_run(self) -> tuple[MlflowClient, str]:
        """The client and the run's id, the run created on first use (called on rank zero only)."""
        if not self._initialized:
            self._start()
        assert self._run_id is not None
        return self._mlflow_client, self._run_id


def _metric_name(key: str) -> str:
    allowed = _METRIC_NAME_REFUSED.sub("", key)
    if allowed != key:
        warnings.warn(
            "MLFlow only allows '_', '/', '.' and ' ' special characters in metric name."
            f" Replacing {key} with {allowed}.",
            RuntimeWarning,
            stacklevel=4,
        )
    return allowed


def _run_status(status: str) -> str:
    # The trainer finalizes with "failed" on any exception; the run is KILLED when it is Ctrl-C being handled.
    if status == "failed" and isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return "KILLED"
    return _STATUS[status]
