"""Weights & Biases logger: one W&B run, started on first use on global rank zero and left open until the process
exits (so a fit and a test in one script log to the same run, and W&B records the script's exit code as the run's
outcome). Every metric row carries the trainer's step as `trainer/global_step`, the run's x-axis; checkpoints
become `model` artifacts, and the run's flow a `state-flow` artifact."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.loggers.checkpoints import checkpoint_settings, checkpoints_to_upload
from stages.loggers.logger import (
    Logger,
    NoExperiment,
    add_prefix,
    check_finalize_status,
    check_prefix,
    hparams_as_mapping,
    import_tracker,
    rank_zero_experiment,
)
from stages.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from torch import nn
    from wandb.sdk.wandb_run import Run

STEP_METRIC = "trainer/global_step"
FLOW_FOLDER = "state-flow"
FILE_POLICIES = ("mutable", "immutable")
# wandb's TensorBoard sync patches torch's event file writer, which TensorBoardLogger does not use
_UNSUPPORTED_INIT_ARGUMENTS = ("sync_tensorboard", "tensorboard")


def _wandb() -> ModuleType:
    return import_tracker("wandb", "wandb", "WandbLogger")


class WandbLogger(Logger):
    """Logs to a W&B run. `name` is the run's display name, `version` (or `id`) its id, `save_dir` (or `dir`) the
    folder its `wandb/` files go under, `project` defaults to `WANDB_PROJECT`, else `lightning_logs`;
    `offline=True` keeps the run local, for a later `wandb sync`. The other keyword arguments go to `wandb.init`
    (`entity`, `group`, `tags`, `config`, `mode`, `resume`, ...).

    `log_model=True` uploads the checkpoint callback's files when the fit succeeds (every save when its
    `save_top_k == -1`), `"all"` at every save; each upload is a version of the `model` artifact `checkpoint_name`
    (default `model-<run id>`) holding `model.ckpt`, with the aliases `latest`, and `best` for the best file."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] | None = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal["all"] | bool = False,
        experiment: Run | None = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: Literal["mutable", "immutable"] = "mutable",
        **kwargs: Any,
    ) -> None:
        wandb = _wandb()
        for argument, value in (("name", name), ("project", project), ("checkpoint_name", checkpoint_name)):
            _check_optional_str(argument, value)
        if not isinstance(offline, bool):
            raise ValueError(f"offline {offline!r} must be a bool")
        if anonymous is not None and not isinstance(anonymous, bool):
            raise ValueError(f"anonymous {anonymous!r} must be a bool or None")
        if not isinstance(log_model, bool) and log_model != "all":
            raise ValueError(f"log_model {log_model!r} must be True, False or 'all'")
        if add_file_policy not in FILE_POLICIES:
            raise ValueError(
                f"add_file_policy {add_file_policy!r} must be one of {', '.join(map(repr, FILE_POLICIES))}"
            )
        if experiment is not None and not isinstance(experiment, wandb.Run):
            raise ValueError(f"experiment {experiment!r} must be a wandb run (what wandb.init returns) or None")
        if offline and log_model:
            raise MisconfigurationException(
                f"Providing log_model={log_model} and offline={offline} is an invalid configuration"
                " since model checkpoints cannot be uploaded in offline mode.\n"
                "Hint: Set `offline=False` to log your model."
            )
        _check_init_arguments(wandb, offline, kwargs)

        self._init_arguments: dict[str, Any] = {
            "name": name,
            "project": project or os.environ.get("WANDB_PROJECT", "lightning_logs"),
            "dir": _run_directory(save_dir, dir),
            "id": _run_id(version, id),
            "resume": "allow",  # the same id continues its run
            **({"mode": "offline"} if offline else {}),
            # wandb warns that anonymous has no effect whenever it is passed, so it is passed only when asked for
            **({"anonymous": "allow"} if anonymous else {}),
            **kwargs,
        }
        self._log_model = log_model
        self._prefix = check_prefix(prefix)
        self._checkpoint_name = checkpoint_name
        self._add_file_policy = add_file_policy
        self._experiment = experiment
        # the run a launching process started and pickled for its spawned ranks (see __getstate__)
        self._shared_run: Run | None = None
        self._uploaded: dict[str, float] = {}
        self._pending_checkpoints: dict[int, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Spawned ranks receive the logger pickled. The run is started here first and travels as wandb's handle
        to it, so rank zero attaches to this process's run: one run for the whole script, finished when it exits."""
        state = self.__dict__.copy()
        if rank_zero_only.rank == 0:
            run = self.experiment
            state["_init_arguments"] = {**self._init_arguments, "id": run.id}
            # a disabled run records nothing and has no handle to attach to: a rank starts its own
            state["_shared_run"] = None if run.disabled else run
        state["_experiment"] = None
        return state

    @property
    def name(self) -> str:
        """The W&B project; the run's display name is `experiment.name`."""
        return self._init_arguments["project"]

    @property
    def version(self) -> str | None:
        """The run's id: the one given until the run exists, then the run's own."""
        if self._experiment is not None:
            return self._experiment.id
        return self._init_arguments["id"]

    @property
    def save_dir(self) -> str | None:
        return self._init_arguments["dir"]

    @property
    @rank_zero_experiment
    def experiment(self) -> Run | NoExperiment:
        """The W&B run: the one given as `experiment`, else the run already active in this process (with a
        warning), else a new one."""
        if self._experiment is None:
            self._experiment = self._shared_run if self._shared_run is not None else self._start_run()
        return self._experiment

    def _start_run(self) -> Run:
        wandb = _wandb()
        if wandb.run is not None:
            warnings.warn(
                "There is a wandb run already in progress and newly created instances of `WandbLogger` will reuse"
                " this run. If this is not desired, call `wandb.finish()` before instantiating `WandbLogger`.",
                TrainerWarning,
                stacklevel=4,
            )
            return wandb.run
        run = wandb.init(**self._init_arguments)
        # W&B's own `_step` counts log calls; charts plot every metric against the trainer's step instead
        run.define_metric(STEP_METRIC)
        run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
        return run

    def watch(
        self, model: nn.Module, log: str | None = "gradients", log_freq: int = 100, log_graph: bool = True
    ) -> None:
        """Log the model's gradients (`log="parameters"`: its parameters, `"all"`: both) every `log_freq` steps,
        and its graph."""
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        row = add_prefix(dict(metrics), self._prefix, self.LOGGER_JOIN_CHAR)
        if step is not None:
            row[STEP_METRIC] = step
        self.experiment.log(row)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | argparse.Namespace) -> None:
        """The run's config gets the hyperparameters: a class as its name, a callable as what it returns when
        called without arguments (its name if that fails or gives another callable), anything that JSON cannot
        hold as its str. Later values replace earlier ones."""
        config = {key: _json_or_str(_called(value)) for key, value in hparams_as_mapping(params).items()}
        self.experiment.config.update(config, allow_val_change=True)

    @rank_zero_only
    def log_table(
        self,
        key: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """A `wandb.Table` of `columns` and `data` rows, or of a pandas `dataframe`; cells can be any W&B media."""
        self.log_metrics({key: _wandb().Table(columns=columns, data=data, dataframe=dataframe)}, step)

    @rank_zero_only
    def log_text(
        self,
        key: str,
        columns: list[str] | None = None,
        data: list[list[str]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """Text, as a table (see `log_table`)."""
        self.log_table(key, columns, data, dataframe, step)

    @rank_zero_only
    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Images (tensors, arrays, PIL images or file paths); each keyword is a list with one value per image
        for `wandb.Image` (`caption`, `masks`, `boxes`, ...)."""
        self.log_metrics({key: _media(_wandb().Image, "images", images, kwargs)}, step)

    @rank_zero_only
    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Audio clips (arrays or file paths); each keyword is a list with one value per clip for `wandb.Audio`
        (`sample_rate`, `caption`)."""
        self.log_metrics({key: _media(_wandb().Audio, "audios", audios, kwargs)}, step)

    @rank_zero_only
    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: list[Any]) -> None:
        """Videos (arrays or file paths); each keyword is a list with one value per video for `wandb.Video`
        (`caption`, `fps`, `format`)."""
        self.log_metrics({key: _media(_wandb().Video, "videos", videos, kwargs)}, step)

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        uploads_each_save = self._log_model == "all" or (
            self._log_model is True and checkpoint_callback.save_top_k == -1
        )
        if uploads_each_save:
            self._upload_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._pending_checkpoints[id(checkpoint_callback)] = checkpoint_callback

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Uploads the checkpoints `log_model=True` held back, after a successful fit only. The run stays open: it
        ends when the process exits, with the process's exit code."""
        check_finalize_status(status)
        if status != "success" or self._experiment is None:
            return
        for callback in self._pending_checkpoints.values():
            self._upload_checkpoints(callback)

    def _upload_checkpoints(self, callback: Any) -> None:
        wandb = _wandb()
        run = self.experiment
        for saved in checkpoints_to_upload(callback, self._uploaded):
            metadata = {
                "score": saved.score,
                "original_filename": Path(saved.path).name,
                type(callback).__name__: checkpoint_settings(callback),
            }
            artifact = wandb.Artifact(name=self._checkpoint_name or f"model-{run.id}", type="model", metadata=metadata)
            artifact.add_file(saved.path, name="model.ckpt", policy=self._add_file_policy)
            run.log_artifact(artifact, aliases=["latest", "best"] if saved.is_best else ["latest"])
            self._uploaded[saved.path] = saved.modified

    @rank_zero_only
    def log_flow_artifacts(self, files: Mapping[str, bytes]) -> None:
        """The files go into the run's folder (`files/state-flow/<n>/`, n counting the trainer calls that ended in
        this run) and become a version of the run's `state-flow` artifact. A run that never started (the trainer
        call failed before its setup) is not started for them, and a disabled run (`mode="disabled"`) keeps
        nothing."""
        if self._experiment is None or self._experiment.disabled:
            return
        run = self._experiment
        folder = _new_numbered_folder(Path(run.dir) / FLOW_FOLDER)
        artifact = _wandb().Artifact(name=f"{FLOW_FOLDER}-{run.id}", type=FLOW_FOLDER)
        for file_name, content in files.items():
            path = folder / file_name
            path.write_bytes(content)
            # the file stays where it is, in the run's folder: nothing rewrites it
            artifact.add_file(str(path), name=file_name, policy="immutable")
        run.log_artifact(artifact)


def _check_optional_str(argument: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{argument} {value!r} must be a str or None")


def _run_directory(save_dir: str | os.PathLike[str] | None, dir: str | os.PathLike[str] | None) -> str | None:
    """Where the run's `wandb/` folder goes; `dir` is another name for `save_dir`. None (or "") leaves it to wandb:
    `WANDB_DIR`, else the working directory."""
    for argument, value in (("save_dir", save_dir), ("dir", dir)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"{argument} {value!r} must be a str, an os.PathLike or None")
        if value is not None and "://" in os.fspath(value):
            raise ValueError(f"{argument} {value!r} is a URL; W&B writes its run folder to a local directory")
    chosen = os.fspath(save_dir) if save_dir is not None else ""
    if dir is not None:
        # save_dir left at its default ("."), dir names the folder
        if chosen not in ("", ".", os.fspath(dir)):
            raise ValueError(
                f"save_dir {save_dir!r} and dir {dir!r} name two folders; dir is another name for save_dir, give one"
            )
        chosen = os.fspath(dir)
    return chosen or None


def _run_id(version: str | None, id: str | None) -> str | None:
    """`id` is another name for `version`."""
    _check_optional_str("version", version)
    _check_optional_str("id", id)
    if version is not None and id is not None and version != id:
        raise ValueError(f"version {version!r} and id {id!r} name two runs; id is another name for version, give one")
    return version or id


def _check_init_arguments(wandb: ModuleType, offline: bool, kwargs: dict[str, Any]) -> None:
    accepted = set(inspect.signature(wandb.init).parameters) - {"name", "project", "dir", "id", "anonymous"}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise TypeError(
            f"WandbLogger got keyword arguments wandb.init does not take: {', '.join(unknown)}; "
            f"it takes {', '.join(sorted(accepted))}"
        )
    for argument in _UNSUPPORTED_INIT_ARGUMENTS:
        if kwargs.get(argument):
            raise ValueError(
                f"WandbLogger({argument}=True) is not supported: TensorBoardLogger writes its event files itself and"
                " wandb's TensorBoard sync does not see them; log the metrics with WandbLogger instead"
            )
    if offline and kwargs.get("mode", "offline") != "offline":
        raise ValueError(f"offline=True and mode={kwargs['mode']!r} contradict each other; give one")


def _called(value: Any) -> Any:
    """A hyperparameter that is a class or a callable, as the config shows it."""
    if inspect.isclass(value):
        return value.__name__
    if not callable(value):
        return value
    try:
        result = value()
    except Exception:
        # most callables need arguments: their name says what they are
        return getattr(value, "__name__", None)
    return getattr(value, "__name__", None) if callable(result) else result


def _json_or_str(value: Any) -> Any:
    # containers go to wandb as they are: it converts what they hold
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    try:
        json.dumps(value)
    except (TypeError, OverflowError):
        return str(value)
    return value


def _media(media_type: Any, argument: str, items: Any, options: dict[str, list[Any]]) -> list[Any]:
    """One `media_type` per item, the i-th of each option list going to the i-th item."""
    if not isinstance(items, list):
        raise TypeError(f'Expected a list as "{argument}", found {type(items)}')
    for option, values in options.items():
        if len(values) != len(items):
            raise ValueError(f"Expected {len(items)} items but only found {len(values)} for {option}")
    return [
        media_type(item, **{option: values[i] for option, values in options.items()}) for i, item in enumerate(items)
    ]


def _new_numbered_folder(parent: Path) -> Path:
    """`parent/<n>` for the smallest n not taken yet."""
    parent.mkdir(parents=True, exist_ok=True)
    number = 0
    while True:
        folder = parent / str(number)
        try:
            folder.mkdir()
        except FileExistsError:
            number += 1
            continue
        return folder
