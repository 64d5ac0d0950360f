"""Turn the Trainer's accelerator/devices/strategy/precision/num_nodes flags into a ready strategy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devices.accelerators import Accelerator, CPUAccelerator, CUDAAccelerator
from devices.precision import MixedPrecision, Precision, canonical_precision, resolve_precision
from devices.strategy import SingleDeviceStrategy

_ACCELERATORS: dict[str, type[Accelerator]] = {"cpu": CPUAccelerator, "cuda": CUDAAccelerator}
_ACCELERATOR_ALIASES = {"gpu": "cuda"}
_ACCELERATORS_NOT_YET = ("mps", "tpu")
_ALLOWED_ACCELERATORS = "'auto', 'cpu', 'cuda', 'gpu' (alias of 'cuda') or an Accelerator instance"

_STRATEGIES = ("auto", "single_device")
# Lightning's registered multi-process strategy names start with one of these.
_MULTI_PROCESS_PREFIXES = ("ddp", "fsdp", "deepspeed", "xla")


def connect(
    accelerator: str | Accelerator = "auto",
    devices: Any = "auto",
    strategy: str = "auto",
    precision: Any = None,
    num_nodes: int = 1,
    plugins: Any = None,
) -> SingleDeviceStrategy:
    """Validate every flag, then build the strategy.

    All problems are reported together in one ValueError, each naming its value and what is allowed.
    """
    problems: list[str] = []
    chosen = _collect(problems, _resolve_accelerator, accelerator)
    device_indices = _collect(problems, _resolve_devices, chosen, devices) if chosen is not None else None
    _collect(problems, _check_strategy, strategy)
    _collect(problems, _check_num_nodes, num_nodes)
    # With other flags already wrong, only check the precision: building it may warn about a run that won't happen.
    plugin = _collect(problems, _resolve_precision, precision, plugins, None if problems else chosen)
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else "Invalid device flags:\n- " + "\n- ".join(problems))
    assert chosen is not None and device_indices is not None and isinstance(plugin, Precision)
    return SingleDeviceStrategy(chosen, chosen.device_for(device_indices[0]), plugin)


def _collect(problems: list[str], check: Callable[..., Any], *args: Any) -> Any:
    try:
        return check(*args)
    except ValueError as error:
        problems.append(str(error))
        return None


def _resolve_precision(value: Any, plugins: Any, accelerator: Accelerator | None) -> Precision | None:
    """The precision plugin from the `precision` flag or from `plugins`, which may hold one instead.

    Without an `accelerator` the values are only checked and nothing is built.
    """
    given = _precision_plugin(plugins)
    if given is not None and value is not None:
        raise ValueError(
            f"precision={value!r} and the precision plugin {given!r} in plugins were both given; choose one"
        )
    if accelerator is None:
        canonical_precision(value)
        return None
    if given is None:
        return resolve_precision(value, accelerator.name)
    if isinstance(given, MixedPrecision) and given.device != accelerator.name:
        raise ValueError(
            f"the precision plugin {given!r} autocasts on {given.device!r}, but the run uses accelerator "
            f"{accelerator.name!r}; build it with device={accelerator.name!r}"
        )
    return given


def _precision_plugin(plugins: Any) -> Precision | None:
    if plugins is None:
        return None
    items = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    others = [item for item in items if not isinstance(item, Precision)]
    if others:
        raise ValueError(
            f"plugins={plugins!r}: {others!r} is not supported yet; plugins accepts precision plugins only "
            "(Precision, MixedPrecision, HalfPrecision, DoublePrecision)"
        )
    if len(items) > 1:
        raise ValueError(f"plugins={plugins!r} holds {len(items)} precision plugins; give at most one")
    return items[0] if items else None


def _resolve_accelerator(value: str | Accelerator) -> Accelerator:
    if isinstance(value, Accelerator):
        if not value.is_available():
            raise ValueError(f"accelerator={value!r} was given, but its hardware is not available in this process")
        return value
    if not isinstance(value, str):
        raise ValueError(f"accelerator={value!r} is not valid; use {_ALLOWED_ACCELERATORS}")
    name = value.strip().lower()
    name = _ACCELERATOR_ALIASES.get(name, name)
    if name == "auto":
        # Lightning's "auto" would also pick MPS or TPU; here it picks the best accelerator we can run.
        return CUDAAccelerator() if CUDAAccelerator.is_available() else CPUAccelerator()
    if name in _ACCELERATORS_NOT_YET:
        raise ValueError(f"accelerator={value!r} is recognised but not supported yet; use {_ALLOWED_ACCELERATORS}")
    if name not in _ACCELERATORS:
        raise ValueError(f"accelerator={value!r} is not valid; use {_ALLOWED_ACCELERATORS}")
    kind = _ACCELERATORS[name]
    if not kind.is_available():
        raise ValueError(
            f"accelerator={value!r} was requested, but CUDA is not available "
            "(torch.cuda.is_available() is False); use accelerator='cpu' or 'auto'"
        )
    return kind()


def _resolve_devices(accelerator: Accelerator, devices: Any) -> list[int]:
    indices = accelerator.parse_devices(devices)
    if len(indices) > 1:
        unit = "processes" if isinstance(accelerator, CPUAccelerator) else "devices"
        raise ValueError(
            f"devices={devices!r} asks for {len(indices)} {unit} on {accelerator.name!r}, which needs a "
            "multi-process strategy; multi-process strategies are not supported yet: use devices=1 "
            + ("" if isinstance(accelerator, CPUAccelerator) else "or one index such as [0] ")
            + "for a single device"
        )
    return indices


def _check_strategy(value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError(
            f"strategy={value!r} is not valid; use one of {list(_STRATEGIES)} (strategy objects are not supported yet)"
        )
    name = value.strip().lower()
    if name in _STRATEGIES:
        return
    if name.startswith(_MULTI_PROCESS_PREFIXES):
        raise ValueError(
            f"strategy={value!r} is a multi-process strategy; multi-process strategies are not supported "
            f"yet: use one of {list(_STRATEGIES)}"
        )
    raise ValueError(f"strategy={value!r} is not a known strategy; use one of {list(_STRATEGIES)}")


def _check_num_nodes(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"num_nodes={value!r} is not valid; use an int >= 1 (only 1 is supported now)")
    if value != 1:
        raise ValueError(
            f"num_nodes={value!r} needs a multi-process strategy; multi-process strategies are not "
            "supported yet: use num_nodes=1"
        )
