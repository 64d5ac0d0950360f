"""Hyperparameters: `save_hyperparameters`, `hparams`, and what checkpoints and loggers get of them."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import pickle
import warnings
from collections.abc import MutableMapping, Sequence
from types import FrameType
from typing import Any

from torch import Tensor, nn

from stages.exceptions import TrainerWarning

_PRIMITIVE_TYPES = (bool, int, float, str)
# LightningCLI's record of the class it built: kept in checkpoints, never logged or compared
_CLASS_PATH = "_class_path"
# names an `__init__` may take that are never hyperparameters
_NOT_HYPERPARAMETERS = ("__class__", "frame", "frame_args")


class AttributeDict(dict):
    """A dict whose keys are also attributes: `hparams.lr` and `hparams["lr"]`; shown one `"key": value` a line."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as missing:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{key}'") from missing

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        del self[key]

    def __repr__(self) -> str:
        if not self:
            return ""
        width = max(len(str(key)) for key in self) + 3
        labels = {key: f'"{key}":' for key in self}
        return "\n".join(f"{labels[key]:{width}s} {self[key]}" for key in sorted(self.keys()))


def get_init_args(frame: FrameType) -> dict[str, Any]:
    """The arguments of the `__init__` running in `frame` as `save_hyperparameters` collects them (`self`,
    `*args` and the `**kwargs` name left out, the keywords merged in); empty unless that `__init__` uses
    `super()`."""
    return _init_args(frame)[1]


def collect_init_args(frame: FrameType) -> dict[str, Any]:
    """The `__init__` arguments `save_hyperparameters` called in `frame` collects: from the first `__init__`
    (with `super()`) of a hyperparameter holder up the stack, through every `__init__` that called it; the
    outer one's value wins for a name both take."""
    collected: dict[str, Any] = {}
    for args in _init_chain(frame):
        collected.update(args)
    return collected


def _init_chain(frame: FrameType) -> list[dict[str, Any]]:
    """Each `__init__`'s arguments, innermost first: frames before the first `__init__` of a holder are passed
    over, the chain ends at the first frame after it that is not one."""
    chain: list[dict[str, Any]] = []
    current: FrameType | None = frame
    while current is not None and current.f_back is not None:
        holder, args = _init_args(current)
        if "__class__" in current.f_locals and isinstance(holder, HyperparametersMixin):
            chain.append(args)
        elif chain:
            break
        current = current.f_back
    return chain


def _init_args(frame: FrameType) -> tuple[Any, dict[str, Any]]:
    """The object an `__init__` (using `super()`) in `frame` builds, and its arguments; (None, {}) for any
    other frame. The values are the locals' current ones."""
    local_vars = frame.f_locals
    if "__class__" not in local_vars or frame.f_code.co_name != "__init__":
        return None, {}
    parameters = list(inspect.signature(local_vars["__class__"].__init__).parameters.values())
    self_name = parameters[0].name
    var_names = [p.name for p in parameters if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    keywords = next((p.name for p in parameters if p.kind is p.VAR_KEYWORD), None)
    args = {p.name: local_vars[p.name] for p in parameters if p.name in local_vars}
    if keywords is not None:
        args.update(args.get(keywords, {}))
    dropped = (self_name, *var_names, *_NOT_HYPERPARAMETERS)
    return local_vars.get(self_name), {k: v for k, v in args.items() if k not in dropped}


def is_picklable(obj: object) -> bool:
    """Whether `obj` survives `pickle.dumps` (what a checkpoint's hyperparameters and a spawned rank need)."""
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RuntimeError, TypeError):
        return False
    return True


def clean_namespace(hparams: MutableMapping[str, Any]) -> None:
    """Drop the hyperparameters pickle cannot write (a checkpoint could not hold them), each with a warning."""
    for key in [key for key, value in hparams.items() if not is_picklable(value)]:
        warnings.warn(
            f"Attribute '{key}' removed from hparams because it cannot be pickled. You can suppress this warning by"
            f" setting `self.save_hyperparameters(ignore=['{key}'])`.",
            TrainerWarning,
            stacklevel=2,
        )
        del hparams[key]


class HyperparametersMixin:
    """`save_hyperparameters` and `hparams`, shared by LightningModule and LightningDataModule."""

    __jit_unused_properties__: list[str] = ["hparams", "hparams_initial"]
    _log_hyperparams: bool = False
    _hparams: Any  # made on first use
    _hparams_initial: Any  # set by save_hyperparameters
    _hparams_name: str | None  # set by save_hyperparameters; checkpoints name it only then

    def _init_hparams(self) -> None:
        """Nothing is logged until save_hyperparameters asks for it; hyperparameters it saved before the
        constructor ran (libraries call it before `super().__init__()`) are kept."""
        self._log_hyperparams = False

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: Sequence[str] | str | None = None,
        frame: FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Store the `__init__` arguments (or the named ones, or one dict, Namespace or OmegaConf config) in
        `hparams`; `ignore` leaves names out, also ones a parent class saved; `logger=False` keeps them from
        the loggers. Called again, the new values are added to the saved ones."""
        self._log_hyperparams = logger
        if len(args) == 1 and not args[0]:
            return  # an empty container: nothing to save
        if frame is None:
            here = inspect.currentframe()
            frame = here.f_back if here is not None else None
        if not isinstance(frame, FrameType):
            raise AttributeError("There is no `frame` available while being required.")
        ignored = _ignored_names(ignore)
        init_args = {k: v for k, v in self._init_arguments(frame).items() if k not in ignored}
        self._set_hparams(self._chosen(args, init_args))
        self.remove_ignored_hparams(ignored)
        _warn_about_modules(self._hparams)
        self._hparams_initial = copy.deepcopy(self._hparams)

    def _init_arguments(self, frame: FrameType) -> dict[str, Any]:
        if dataclasses.is_dataclass(self):
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return collect_init_args(frame)

    def _chosen(self, args: tuple[Any, ...], init_args: dict[str, Any]) -> Any:
        """What `save_hyperparameters(*args)` saves, and the name `load_from_checkpoint` passes it back as."""
        if not args:
            self._hparams_name = "kwargs" if init_args else None
            return init_args
        objects = [arg for arg in args if not isinstance(arg, str)]
        if len(objects) == 1:
            given = objects[0]
            self._hparams_name = next((k for k, v in init_args.items() if _same_value(v, given)), None)
            return given
        self._hparams_name = "kwargs"
        return {name: _init_argument(init_args, name) for name in args if isinstance(name, str)}

    def _set_hparams(self, hp: Any) -> None:
        hp = _as_hparams(hp)
        if isinstance(hp, dict) and isinstance(self.hparams, dict):
            self.hparams.update(hp)
        else:
            self._hparams = hp

    def remove_ignored_hparams(self, ignore_list: list[str]) -> None:
        """Drop saved hyperparameters by name: a subclass ignores what its parent class saved."""
        for key in ignore_list:
            self.hparams.pop(key, None)

    @property
    def hparams(self) -> Any:
        """The saved hyperparameters (an AttributeDict, or the OmegaConf config given); yours to change."""
        if "_hparams" not in self.__dict__:
            self._hparams = AttributeDict()
        return self._hparams

    @property
    def hparams_initial(self) -> Any:
        """A copy of the hyperparameters as `save_hyperparameters` saved them; changing it changes nothing."""
        if "_hparams_initial" not in self.__dict__:
            return AttributeDict()
        return copy.deepcopy(self._hparams_initial)


def _ignored_names(ignore: Sequence[str] | str | None) -> list[str]:
    if ignore is None:
        return []
    if isinstance(ignore, str):
        return [ignore]
    return list(dict.fromkeys(name for name in ignore if isinstance(name, str)))


def _init_argument(init_args: dict[str, Any], name: str) -> Any:
    try:
        return init_args[name]
    except KeyError:
        raise KeyError(f"'{name}': save_hyperparameters({name!r}) names no (unignored) argument of __init__") from None


def _same_value(value: Any, given: Any) -> bool:
    """Whether the argument `value` is the object saved (equal counts, as in Lightning)."""
    try:
        return bool(value == given)
    except (RuntimeError, TypeError, ValueError):
        return value is given  # e.g. a tensor against a dict: no single truth value


def _as_hparams(hp: Any) -> Any:
    if isinstance(hp, argparse.Namespace):
        hp = vars(hp)
    if isinstance(hp, dict):
        return AttributeDict(hp)
    if isinstance(hp, _PRIMITIVE_TYPES):
        raise ValueError(f"Primitives {_PRIMITIVE_TYPES} are not allowed.")
    if not isinstance(hp, MutableMapping):
        raise ValueError(f"Unsupported config type of {type(hp)}.")
    return hp


def _warn_about_modules(hparams: Any) -> None:
    for key, value in hparams.items():
        if isinstance(value, nn.Module):
            warnings.warn(
                f"Attribute {key!r} is an instance of `nn.Module` and is already saved during checkpointing."
                f" It is recommended to ignore them using `self.save_hyperparameters(ignore=[{key!r}])`.",
                TrainerWarning,
                stacklevel=3,
            )


# ---- what checkpoints and loggers get ------------------------------------------------------------------------


def checkpoint_entries(owner: Any) -> dict[str, Any]:
    """The checkpoint keys for `owner`'s hyperparameters: their name (once save_hyperparameters set one), the
    values (an OmegaConf config kept as it is, with its type), nothing when there are none."""
    hparams = owner.hparams
    if not hparams:
        return {}
    entries: dict[str, Any] = {}
    if "_hparams_name" in vars(owner):
        entries[owner.CHECKPOINT_HYPER_PARAMS_NAME] = owner._hparams_name
    if _is_omegaconf_container(hparams):
        entries[owner.CHECKPOINT_HYPER_PARAMS_KEY] = hparams
        entries[owner.CHECKPOINT_HYPER_PARAMS_TYPE] = type(hparams)
    else:
        entries[owner.CHECKPOINT_HYPER_PARAMS_KEY] = dict(hparams)
    return entries


def _is_omegaconf_container(value: Any) -> bool:
    if not type(value).__module__.startswith("omegaconf"):
        return False  # omegaconf is imported only for what may be one of its configs
    from omegaconf import Container

    return isinstance(value, Container)


def hparams_to_log(module: Any, datamodule: Any) -> dict[str, Any] | None:
    """What the loggers' `log_hyperparams` gets: the module's and the datamodule's initial hyperparameters, of
    those that called save_hyperparameters with `logger=True`; None when neither did. A name both hold with
    different values raises RuntimeError."""
    module_logs = module._log_hyperparams
    datamodule_logs = datamodule is not None and datamodule._log_hyperparams
    if module_logs and datamodule_logs:
        params = _merged(module.hparams_initial, datamodule.hparams_initial)
    elif module_logs:
        params = module.hparams_initial
    elif datamodule_logs:
        params = datamodule.hparams_initial
    else:
        return None
    return {key: value for key, value in params.items() if key != _CLASS_PATH}


def _merged(module_hparams: Any, datamodule_hparams: Any) -> dict[str, Any]:
    shared = module_hparams.keys() & datamodule_hparams.keys()
    clashing = [k for k in shared if k != _CLASS_PATH and _differ(module_hparams[k], datamodule_hparams[k])]
    if clashing:
        raise RuntimeError(
            f"Error while merging hparams: the keys {clashing} are present "
            "in both the LightningModule's and LightningDataModule's hparams "
            "but have different values."
        )
    return {**module_hparams, **datamodule_hparams}


def _differ(module_value: Any, datamodule_value: Any) -> bool:
    """Values of different types differ; tensors are the same only as one object (their copies never are)."""
    if type(module_value) is not type(datamodule_value):
        return True
    if isinstance(module_value, Tensor):
        return module_value is not datamodule_value
    return bool(module_value != datamodule_value)
