"""Hyperparameter files (`hparams.yaml`) and building a module or DataModule from a checkpoint."""

from __future__ import annotations

import argparse
import ast
import csv
import inspect
import os
import warnings
from collections.abc import Mapping
from typing import Any

import fsspec
import torch
import yaml

from devices.checkpoint_io import load_checkpoint
from devices.sharded import consolidate, is_sharded_checkpoint
from stages.exceptions import TrainerWarning

PathLike = str | os.PathLike[str]


def save_hparams_to_yaml(config_yaml: PathLike, hparams: Mapping[str, Any] | argparse.Namespace) -> None:
    """Write `hparams` as YAML; a value YAML cannot represent is left out with a warning naming it."""
    fs, path = fsspec.core.url_to_fs(os.fspath(config_yaml))
    parent = os.path.dirname(path)
    if parent and not fs.isdir(parent):
        raise RuntimeError(f"cannot write {os.fspath(config_yaml)!r}: the folder {parent!r} does not exist")
    text = hparams_yaml(hparams)
    with fs.open(path, "w", newline="") as out:
        out.write(text)


def hparams_yaml(hparams: Mapping[str, Any] | argparse.Namespace) -> str:
    """`hparams` as YAML text, leaving out (with a warning) each value YAML cannot represent."""
    if isinstance(hparams, argparse.Namespace):
        hparams = vars(hparams)
    if not isinstance(hparams, Mapping):
        raise TypeError(f"hparams must be a dict or an argparse.Namespace; got {type(hparams).__name__}")
    writable: dict[str, Any] = {}
    for key, value in _plain(hparams).items():
        try:
            yaml.dump(value)
        except (TypeError, ValueError, yaml.YAMLError):
            warnings.warn(
                f"Skipping hyperparameter {key!r}: its value cannot be written as YAML", TrainerWarning, stacklevel=3
            )
            continue
        writable[key] = value
    return yaml.dump(writable)


def load_hparams_from_yaml(config_yaml: PathLike) -> dict[str, Any]:
    """Read a file written by `save_hparams_to_yaml`; a missing file gives {} and a warning."""
    fs, path = fsspec.core.url_to_fs(os.fspath(config_yaml))
    if not fs.exists(path):
        warnings.warn(f"Missing hyperparameter file: {os.fspath(config_yaml)}", TrainerWarning, stacklevel=2)
        return {}
    with fs.open(path, "r") as stream:
        loaded = yaml.full_load(stream)
    return dict(loaded or {})


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
        warnings.warn(f"Missing Tags: {os.fspath(tags_csv)}.", TrainerWarning, stacklevel=2)
        return {}
    with open(tags_csv, newline="") as source:
        return {row["key"]: _literal(row["value"]) for row in csv.DictReader(source)}


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _plain(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """AttributeDicts and Namespaces as plain dicts, so the YAML carries no Python class tags for them."""
    plain: dict[str, Any] = {}
    for key, value in hparams.items():
        if isinstance(value, argparse.Namespace):
            value = vars(value)
        plain[key] = _plain(value) if isinstance(value, dict) else value
    return plain


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
    if is_sharded_checkpoint(checkpoint_path):
        checkpoint = consolidate(checkpoint_path)  # a sharded folder: every shard read into full tensors
    else:
        checkpoint = load_checkpoint(
            checkpoint_path,
            map_location=_cpu_storage if map_location is None else map_location,
            weights_only=bool(weights_only),
        )
    key = cls.CHECKPOINT_HYPER_PARAMS_KEY
    if hparams_file is not None:
        extension = os.fspath(hparams_file).rsplit(".", 1)[-1].lower()
        if extension not in ("yml", "yaml"):
            raise ValueError(f"hparams_file {os.fspath(hparams_file)!r} must be a .yaml or .yml file")
        checkpoint[key] = load_hparams_from_yaml(hparams_file)
    checkpoint.setdefault(key, {})
    checkpoint[key].update(kwargs)
    instance = cls(**_init_arguments(cls, checkpoint))
    if isinstance(instance, torch.nn.Module):
        return _load_weights(instance, checkpoint, strict)
    state = checkpoint.get(cls.__qualname__)
    if state is not None:
        instance.load_state_dict(state)
    return instance


def _cpu_storage(storage: Any, location: str) -> Any:
    """The default map_location: storages stay where torch.load deserialized them, on the CPU, so a GPU-saved
    file loads on a host without a GPU."""
    return storage


def _init_arguments(cls: type[Any], checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The saved hyperparameters that `cls.__init__` takes (all of them when it has **kwargs)."""
    arguments = dict(checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY) or {})
    parameters = inspect.signature(cls).parameters
    name = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_NAME)
    if name and name in parameters:
        return {name: arguments}  # the hyperparameters were one argument, such as a dict named `hparams`
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return arguments
    return {key: value for key, value in arguments.items() if key in parameters}


def _load_weights(module: Any, checkpoint: dict[str, Any], strict: bool | None) -> Any:
    module.on_load_checkpoint(checkpoint)
    strict = module.strict_loading if strict is None else strict
    state_dict = checkpoint["state_dict"]
    result = module.load_state_dict(state_dict, strict=strict)
    if not strict:
        if result.missing_keys:
            warnings.warn(
                f"Keys missing from the checkpoint's state_dict: {result.missing_keys}", TrainerWarning, stacklevel=3
            )
        if result.unexpected_keys:
            warnings.warn(
                f"Unexpected keys in the checkpoint's state_dict: {result.unexpected_keys}",
                TrainerWarning,
                stacklevel=3,
            )
    # the module comes back where the loaded weights are (map_location decides)
    device = next((t.device for t in state_dict.values() if isinstance(t, torch.Tensor)), torch.device("cpu"))
    return module.to(device)
