"""Hyperparameter files (`hparams.yaml`) and building a module or DataModule from a checkpoint."""

from __future__ import annotations

import argparse
import ast
import copy
import csv
import inspect
import os
import warnings
from collections.abc import Mapping
from enum import Enum
from typing import Any

import fsspec
import torch
import yaml

from devices.checkpoint_io import load_checkpoint
from devices.sharded import consolidate, is_sharded_checkpoint
from stages.exceptions import TrainerWarning
from stages.hparams import AttributeDict

PathLike = str | os.PathLike[str]


class MissingHparamsFileWarning(TrainerWarning, RuntimeWarning):
    """A hyperparameter file that is not there: the hyperparameters read as {}."""


def save_hparams_to_yaml(
    config_yaml: PathLike, hparams: Mapping[str, Any] | argparse.Namespace, use_omegaconf: bool = True
) -> None:
    """Write `hparams` as YAML; the folder must exist. With omegaconf installed and `use_omegaconf`, OmegaConf
    writes it (configs resolved); otherwise a value YAML cannot represent is left out with a warning."""
    fs, path = fsspec.core.url_to_fs(os.fspath(config_yaml))
    folder = os.path.dirname(os.fspath(config_yaml))
    if not fs.isdir(os.path.dirname(path)):
        raise RuntimeError(f"Missing folder: {folder}.")
    text = hparams_yaml(hparams, use_omegaconf)
    with fs.open(path, "w", newline="", encoding="utf-8") as out:
        out.write(text)


def hparams_yaml(hparams: Mapping[str, Any] | argparse.Namespace, use_omegaconf: bool = True) -> str:
    """The text `save_hparams_to_yaml` writes for `hparams`."""
    if isinstance(hparams, argparse.Namespace):
        hparams = vars(hparams)
    elif isinstance(hparams, AttributeDict):
        hparams = dict(hparams)
    if type(hparams) is dict and not hparams:
        return "{}\n"  # both writers' text for no hyperparameters (most runs with a logger), without building a config
    omegaconf = _omegaconf() if use_omegaconf else None
    if omegaconf is not None:
        # a copy: resolving must not change the caller's configs
        hparams = _containers_resolved(omegaconf, copy.deepcopy(hparams))
        text = _omegaconf_yaml(omegaconf, hparams)
        if text is not None:
            return text
    if not isinstance(hparams, dict):
        raise TypeError("hparams must be dictionary")
    return yaml.dump(_yaml_writable(hparams))


def _omegaconf() -> Any:
    """The omegaconf module, or None when it is not installed."""
    try:
        import omegaconf
    except ImportError:
        return None
    return omegaconf


def _omegaconf_yaml(omegaconf: Any, hparams: Any) -> str | None:
    """OmegaConf's YAML for `hparams`, or None when OmegaConf cannot hold one of its values."""
    from omegaconf.errors import UnsupportedValueType, ValidationError

    try:
        return str(omegaconf.OmegaConf.to_yaml(omegaconf.OmegaConf.create(hparams)))
    except (UnsupportedValueType, ValidationError):
        return None


def _containers_resolved(omegaconf: Any, value: Any) -> Any:
    if isinstance(value, omegaconf.DictConfig):
        return omegaconf.OmegaConf.to_container(value, resolve=True)
    if isinstance(value, dict):
        return type(value)({key: _containers_resolved(omegaconf, item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return type(value)(_containers_resolved(omegaconf, item) for item in value)
    return value


def _yaml_writable(hparams: dict[str, Any]) -> dict[str, Any]:
    """The values `yaml.dump` can write (an Enum as its name); each other one is left out with a warning."""
    writable: dict[str, Any] = {}
    for key, value in hparams.items():
        value = value.name if isinstance(value, Enum) else value
        try:
            yaml.dump(value)
        except (TypeError, ValueError):
            warnings.warn(
                f"Skipping '{key}' parameter because it is not possible to safely dump to YAML.",
                TrainerWarning,
                stacklevel=4,
            )
            continue
        writable[key] = value
    return writable


def load_hparams_from_yaml(config_yaml: PathLike, use_omegaconf: bool = True) -> Any:
    """Read a hyperparameter YAML file: an OmegaConf config when omegaconf is installed, `use_omegaconf` is
    set and OmegaConf can hold the content, else what YAML read; a missing file gives {} and a warning."""
    fs, path = fsspec.core.url_to_fs(os.fspath(config_yaml))
    if not fs.exists(path):
        warnings.warn(f"Missing Tags: {os.fspath(config_yaml)}.", MissingHparamsFileWarning, stacklevel=2)
        return {}
    with fs.open(path, "r") as stream:
        hparams = yaml.full_load(stream)
    omegaconf = _omegaconf() if use_omegaconf else None
    if omegaconf is None:
        return hparams
    from omegaconf.errors import UnsupportedValueType, ValidationError

    try:
        return omegaconf.OmegaConf.create(hparams)
    except (UnsupportedValueType, ValidationError):
        return hparams


def save_hparams_to_tags_csv(tags_csv: PathLike, hparams: Mapping[str, Any] | argparse.Namespace) -> None:
    """Write `hparams` as a two-column CSV (`key,value`, values as `str` gives them, None as empty); the folder
    must exist."""
    folder = os.path.dirname(os.fspath(tags_csv))
    if folder and not os.path.isdir(folder):
        raise RuntimeError(f"Missing folder: {folder}.")
    params = vars(hparams) if isinstance(hparams, argparse.Namespace) else hparams
    with open(tags_csv, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["key", "value"])
        writer.writerows(params.items())


def load_hparams_from_tags_csv(tags_csv: PathLike) -> dict[str, Any]:
    """Read a file written by `save_hparams_to_tags_csv`: each value as the Python literal it spells, else the
    text; a missing file gives {} and a warning."""
    if not os.path.isfile(tags_csv):
        warnings.warn(f"Missing Tags: {os.fspath(tags_csv)}.", MissingHparamsFileWarning, stacklevel=2)
        return {}
    with open(tags_csv, newline="") as source:
        return {row["key"]: _literal(row["value"]) for row in csv.DictReader(source)}


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load_from_checkpoint(
    cls: type[Any],
    checkpoint_path: PathLike,
    map_location: Any = None,
    hparams_file: PathLike | None = None,
    strict: bool | None = None,
    weights_only: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Build `cls` (a LightningModule or LightningDataModule) from a checkpoint; see their `load_from_checkpoint`."""
    checkpoint = _read(checkpoint_path, map_location, weights_only)
    key = cls.CHECKPOINT_HYPER_PARAMS_KEY
    if hparams_file is not None:
        checkpoint[key] = _hparams_from_file(hparams_file)
    checkpoint.setdefault(key, {})
    checkpoint[key].update(kwargs)
    instance = cls(**_init_arguments(cls, checkpoint, kwargs))
    if isinstance(instance, torch.nn.Module):
        return _load_weights(instance, checkpoint, strict, checkpoint_path)
    state = checkpoint.get(cls.__qualname__)
    if state is not None:
        instance.load_state_dict(state)
    return instance


def _read(checkpoint_path: PathLike, map_location: Any, weights_only: bool | None) -> dict[str, Any]:
    if is_sharded_checkpoint(checkpoint_path):
        return consolidate(checkpoint_path)  # a sharded folder: every shard read into full tensors
    return load_checkpoint(
        checkpoint_path,
        map_location=map_location or _default_map_location,
        # unset is torch's default: its safe unpickling
        weights_only=True if weights_only is None else weights_only,
    )


def _hparams_from_file(hparams_file: PathLike) -> Any:
    extension = os.fspath(hparams_file).split(".")[-1].lower()
    if extension == "csv":
        return load_hparams_from_tags_csv(hparams_file)
    if extension in ("yml", "yaml"):
        return load_hparams_from_yaml(hparams_file)
    raise ValueError(f".csv, .yml or .yaml is required for `hparams_file`; got {os.fspath(hparams_file)!r}")


def _default_map_location(storage: Any, location: str) -> Any:
    """Storages stay on the device they were saved from when this host has it; otherwise they come to the CPU,
    so a GPU-saved file loads on a host without a GPU."""
    if location.startswith("cuda") and not torch.cuda.is_available():
        return storage.cpu()
    if location.startswith("mps") and not torch.backends.mps.is_available():
        return storage.cpu()
    return None


def _init_arguments(cls: type[Any], checkpoint: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments: the saved hyperparameters (as one argument when they were saved from one,
    in the saved config type), then `overrides`; only the names `__init__` takes unless it takes **kwargs."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    varargs = [p.name for p in parameters if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    names = [p.name for p in list(parameters)[1:] if p.name not in varargs]
    arguments: Any = {}
    if cls.CHECKPOINT_HYPER_PARAMS_KEY in checkpoint:
        saved_type = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_TYPE)
        arguments = _as_saved_type(checkpoint[cls.CHECKPOINT_HYPER_PARAMS_KEY], saved_type)
        saved_as = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_NAME)
        if saved_as and saved_as in names:
            arguments = {saved_as: arguments}  # the hyperparameters were one argument, such as a config
    arguments = {**arguments, **overrides}
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return arguments
    return {key: value for key, value in arguments.items() if key in names}


def _as_saved_type(hparams: Any, hparams_type: Any) -> Any:
    """The saved hyperparameters in the type they were saved as (an OmegaConf config's class is saved)."""
    if not hparams_type:
        return hparams
    if isinstance(hparams_type, str):
        return AttributeDict(hparams)  # files of old versions saved the type's name
    return hparams_type(hparams)


def _load_weights(module: Any, checkpoint: dict[str, Any], strict: bool | None, path: PathLike) -> Any:
    if strict is not None and module._strict_loading is not None and strict != module.strict_loading:
        raise ValueError(
            f"You set `.load_from_checkpoint(..., strict={strict!r})` which is in conflict with"
            f" `{type(module).__name__}.strict_loading={module.strict_loading!r}. Please set the same value for both"
            " of them."
        )
    strict = module.strict_loading if strict is None else strict
    module.configure_model()  # the default does nothing: calling it is the same as calling only an override
    module.on_load_checkpoint(checkpoint)
    state_dict = checkpoint["state_dict"]
    result = module.load_state_dict(state_dict, strict=strict)
    if not strict:
        _warn_about_keys(result)
    if not state_dict:
        warnings.warn(f"The state dict in {path!r} contains no parameters.", TrainerWarning, stacklevel=3)
        return module
    # the module comes back where the loaded weights are (map_location decides)
    device = next((t.device for t in state_dict.values() if isinstance(t, torch.Tensor)), torch.device("cpu"))
    return module.to(device)


def _warn_about_keys(result: Any) -> None:
    if result.missing_keys:
        warnings.warn(
            f"Found keys that are in the model state dict but not in the checkpoint: {result.missing_keys}",
            TrainerWarning,
            stacklevel=4,
        )
    if result.unexpected_keys:
        warnings.warn(
            f"Found keys that are not in the model state dict but in the checkpoint: {result.unexpected_keys}",
            TrainerWarning,
            stacklevel=4,
        )
