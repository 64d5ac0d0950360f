"""The Trainer's flags: Lightning 2.6's constructor arguments, validated up front in one pass.

Every bad field is reported in one error, with the value given and what is allowed. Flags whose behaviour is
not built are refused here, never accepted and ignored.
"""

from __future__ import annotations

import ast
import datetime
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from stages.callbacks.timer import parse_duration
from stages.exceptions import MisconfigurationException

_TIME = (str, datetime.timedelta, dict)


class InvalidTrainerArguments(MisconfigurationException, ValueError, TypeError):
    """Raised by `Trainer(...)` with every bad field listed.

    One error reports every bad field, so it is each class Lightning raises for one of them: its
    MisconfigurationException, and ValueError or TypeError where Lightning raises those.
    """


def _limit(name: str, value: Any) -> int | float:
    """Lightning's limit rule: None -> 1.0, [0, 1] kept as given, whole numbers > 1 -> int."""
    if value is None:
        return 1.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        if 0 <= value <= 1:
            return value
        if value > 1 and float(value).is_integer():
            return int(value)
    raise ValueError(_invalid_limit(name, value))


def _invalid_limit(name: str, value: Any) -> str:
    return (
        f"You have passed invalid value {value} for {name}, it has to be in [0.0, 1.0] or an int. "
        f"(got {value!r}: give an int >= 0 or a float in [0.0, 1.0])"
    )


def _duration(value: Any, message: str) -> Any:
    """A duration flag checked now, so a bad one is refused with the other fields."""
    try:
        parse_duration(value)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{message} ({error})") from None
    return value


class TrainerConfig(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    accelerator: Any = "auto"
    strategy: Any = "auto"
    devices: Any = "auto"
    num_nodes: int = 1
    precision: Any = None
    logger: Any = None
    callbacks: Any = None
    fast_dev_run: int | bool = False
    max_epochs: int | None = None
    min_epochs: int | None = None
    max_steps: int = -1
    min_steps: int | None = None
    max_time: Any = None
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    limit_test_batches: Any = None
    limit_predict_batches: Any = None
    overfit_batches: Any = 0.0
    val_check_interval: Any = None
    check_val_every_n_epoch: Any = 1
    num_sanity_val_steps: int | None = None
    log_every_n_steps: int | None = None
    enable_checkpointing: bool | None = None
    enable_progress_bar: bool | None = None
    enable_model_summary: bool | None = None
    accumulate_grad_batches: int = 1
    gradient_clip_val: Any = None
    gradient_clip_algorithm: str | None = None
    deterministic: bool | str | None = None
    benchmark: bool | None = None
    inference_mode: bool = True
    use_distributed_sampler: bool = True
    profiler: Any = None
    detect_anomaly: bool = False
    barebones: bool = False
    plugins: Any = None
    sync_batchnorm: bool = False
    reload_dataloaders_every_n_epochs: Any = 0
    default_root_dir: str | os.PathLike[str] | None = None
    enable_autolog_hparams: bool = True
    model_registry: str | None = None

    @field_validator("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")
    @classmethod
    def _limits(cls, value: Any, info: Any) -> int | float:
        return _limit(info.field_name, value)

    @field_validator("overfit_batches")
    @classmethod
    def _overfit(cls, value: Any) -> int | float:
        return _limit("overfit_batches", value)

    @field_validator("fast_dev_run")
    @classmethod
    def _fast_dev_run(cls, value: int | bool) -> int | bool:
        if value < 0:
            raise ValueError(f"fast_dev_run={value!r} is not a valid configuration. It should be >= 0.")
        return True if value is not True and value == 1 else value

    @field_validator("max_epochs")
    @classmethod
    def _max_epochs(cls, value: int | None) -> int | None:
        if value is not None and value < -1:
            raise ValueError(f"`max_epochs` must be a non-negative integer or -1. You passed in {value}.")
        return value

    @field_validator("max_steps")
    @classmethod
    def _max_steps(cls, value: int) -> int:
        if value < -1:
            raise ValueError(
                f"`max_steps` must be a non-negative integer or -1 (infinite steps). You passed in {value}."
            )
        return value

    @field_validator("min_epochs", "min_steps")
    @classmethod
    def _minimums(cls, value: int | None, info: Any) -> int | None:
        if value is not None and value < 0:
            raise ValueError(f"{info.field_name}={value!r} must be None or >= 0")
        return value

    @field_validator("val_check_interval")
    @classmethod
    def _val_check_interval(cls, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, _TIME):
            return _duration(
                value,
                f"Invalid time format for `val_check_interval`: {value!r}. Expected 'DD:HH:MM:SS' "
                "(or a datetime.timedelta, or a dict of timedelta's arguments).",
            )
        if value == 0 and not isinstance(value, bool):
            raise ValueError(
                f"val_check_interval={value!r} would never validate; give a float in (0.0, 1.0] or an int > 0"
            )
        limit = _limit("val_check_interval", value)
        if isinstance(limit, float) and limit > 1.0:
            raise ValueError(_invalid_limit("val_check_interval", value))
        return value

    @field_validator("max_time")
    @classmethod
    def _max_time(cls, value: Any) -> Any:
        if value is None:
            return value
        return _duration(
            value, f"`Timer(duration={value!r})` is not a valid duration. Expected a string in the format DD:HH:MM:SS."
        )

    @field_validator("check_val_every_n_epoch")
    @classmethod
    def _check_val_every_n_epoch(cls, value: Any) -> int | None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"`check_val_every_n_epoch` should be an integer, found {value!r}.")
        if value is not None and value < 1:
            raise ValueError(f"check_val_every_n_epoch={value!r} must be an int >= 1 or None")
        return value

    @field_validator("num_sanity_val_steps")
    @classmethod
    def _sanity(cls, value: int | None) -> int | None:
        if value is not None and value < -1:
            raise ValueError(f"num_sanity_val_steps={value!r} must be -1 (all), 0 or a positive int")
        return value

    @field_validator("log_every_n_steps")
    @classmethod
    def _log_every(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError(f"log_every_n_steps={value!r} must be >= 0")
        return value

    @field_validator("reload_dataloaders_every_n_epochs")
    @classmethod
    def _reload(cls, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"`reload_dataloaders_every_n_epochs` should be an int >= 0, got {value}.")
        return value

    @field_validator("gradient_clip_val")
    @classmethod
    def _clip_val(cls, value: Any) -> int | float | None:
        if value is not None and not isinstance(value, int | float):
            raise ValueError(f"`gradient_clip_val` should be an int or a float. Got {value}.")
        return value

    @field_validator("accumulate_grad_batches")
    @classmethod
    def _accumulate(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"accumulate_grad_batches={value!r} must be an int >= 1")
        return value

    @field_validator("gradient_clip_algorithm")
    @classmethod
    def _clip_algorithm(cls, value: str | None) -> str | None:
        if value is not None and value.lower() not in ("norm", "value"):
            raise ValueError(f"`gradient_clip_algorithm` {value} is invalid. Allowed algorithms: ['value', 'norm'].")
        return None if value is None else value.lower()

    @field_validator("deterministic")
    @classmethod
    def _deterministic(cls, value: bool | str | None) -> bool | str | None:
        if isinstance(value, str) and value != "warn":
            raise ValueError(f"deterministic={value!r} must be None, True, False or 'warn'")
        return value

    @field_validator("profiler")
    @classmethod
    def _profiler(cls, value: Any) -> Any:
        from statemachine.profilers import PROFILERS, Profiler

        if value is None or isinstance(value, Profiler):
            return value
        if isinstance(value, str) and value.lower() in PROFILERS:
            return value
        if isinstance(value, str):
            raise ValueError(
                f"profiler={value!r}: When passing string value for the `profiler` parameter of `Trainer`, it can "
                f"only be one of {list(PROFILERS)}"
            )
        raise ValueError(f"profiler={value!r} must be None, a Profiler instance or one of {list(PROFILERS)}")

    @field_validator("model_registry")
    @classmethod
    def _not_built(cls, value: Any, info: Any) -> Any:
        if value is not None:
            raise ValueError(f"{info.field_name}={value!r} is not supported yet; leave it as None")
        return value

    @model_validator(mode="after")
    def _combinations(self) -> TrainerConfig:
        if self.check_val_every_n_epoch is None and isinstance(self.val_check_interval, float):
            raise ValueError(
                "`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
                "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`."
            )
        if self.barebones:
            self._check_barebones()
        return self

    def _check_barebones(self) -> None:
        # A flag is set when it holds anything but "unset" or "off" (None, False, 0).
        conflicts = [
            f"`Trainer(barebones=True, {name}={value!r})` was passed. {why} in barebones mode."
            for name, why in _BAREBONES_REASONS
            if (value := getattr(self, name)) not in (None, False)
        ]
        if conflicts:
            raise ValueError("; ".join(conflicts))


_SLOWS = "%s can impact raw speed so it is disabled"
# Each flag barebones=True turns off, with Lightning's reason, in Lightning's order.
_BAREBONES_REASONS = (
    ("enable_checkpointing", _SLOWS % "Checkpointing"),
    ("logger", _SLOWS % "Logging"),
    ("enable_progress_bar", _SLOWS % "The progress bar"),
    ("log_every_n_steps", _SLOWS % "Logging"),
    ("enable_model_summary", _SLOWS % "Model summary"),
    ("num_sanity_val_steps", _SLOWS % "Sanity checking"),
    ("fast_dev_run", "Development run is not meant for raw speed evaluation so it is disabled"),
    ("detect_anomaly", _SLOWS % "Anomaly detection"),
    ("profiler", _SLOWS % "Profiling"),
)


def validate_config(arguments: dict[str, Any]) -> TrainerConfig:
    """Build the config, turning pydantic's errors into one message that lists every bad field."""
    try:
        return TrainerConfig(**arguments)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            field = ".".join(str(part) for part in item["loc"]) or "arguments"
            given = arguments.get(str(item["loc"][0])) if item["loc"] else None
            message = item["msg"].removeprefix("Value error, ")
            lines.append(f"  {field}: {message}" + ("" if repr(given) in message else f" (got {given!r})"))
        raise InvalidTrainerArguments("invalid Trainer arguments:\n" + "\n".join(lines)) from None


def environment_defaults(class_name: str, known: set[str]) -> dict[str, Any]:
    """`PL_<CLASSNAME>_<ARG>` defaults, read as Lightning does: literal_eval, else the raw string."""
    prefix = f"PL_{class_name.upper()}_"
    defaults: dict[str, Any] = {}
    for key, raw in os.environ.items():
        name = key[len(prefix) :].lower()
        if not key.startswith(prefix) or name not in known or raw == "":
            continue
        try:
            defaults[name] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            defaults[name] = raw
    return defaults
