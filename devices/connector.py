"""Turn the Trainer's accelerator/devices/strategy/precision/num_nodes flags into a ready strategy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devices.accelerators import Accelerator, CPUAccelerator, CUDAAccelerator
from devices.checkpoint_plugin import DEFAULT_CHECKPOINT_IO, CheckpointIO
from devices.ddp import DDPStrategy
from devices.environments import ClusterEnvironment, detect
from devices.parallel import ParallelStrategy
from devices.precision import FSDPPrecision, MixedPrecision, Precision, canonical_precision, resolve_precision
from devices.strategy import SingleDeviceStrategy, Strategy

_ACCELERATORS: dict[str, type[Accelerator]] = {"cpu": CPUAccelerator, "cuda": CUDAAccelerator}
_ACCELERATOR_ALIASES = {"gpu": "cuda"}
_ACCELERATORS_NOT_YET = ("mps", "tpu")
_ALLOWED_ACCELERATORS = "'auto', 'cpu', 'cuda', 'gpu' (alias of 'cuda') or an Accelerator instance"

# Lightning's DDP strategy names: the launch method, and whether DDP looks for unused parameters.
_DDP_NAMES: dict[str, tuple[str, bool]] = {
    "ddp": ("popen", False),
    "ddp_spawn": ("spawn", False),
    "ddp_fork": ("fork", False),
    "ddp_notebook": ("fork", False),
}
for _name, (_method, _) in list(_DDP_NAMES.items()):
    _DDP_NAMES[f"{_name}_find_unused_parameters_true"] = (_method, True)
    _DDP_NAMES[f"{_name}_find_unused_parameters_false"] = (_method, False)
_FSDP_NAMES = ("fsdp", "fsdp_cpu_offload")
_STRATEGIES = ("auto", "single_device", *_DDP_NAMES, *_FSDP_NAMES)
# Lightning's other multi-process strategies, which this project does not run.
_UNSUPPORTED_PREFIXES = ("deepspeed", "xla", "ddp_")


def connect(
    accelerator: str | Accelerator = "auto",
    devices: Any = "auto",
    strategy: str | Strategy = "auto",
    precision: Any = None,
    num_nodes: int = 1,
    plugins: Any = None,
    sync_batchnorm: bool = False,
) -> Strategy:
    """Validate every flag, then build the strategy.

    All problems are reported together in one ValueError, each naming its value and what is allowed.
    """
    problems: list[str] = []
    _collect(problems, _check_plugin_types, plugins)
    given_environment = _collect(problems, _cluster_environment, plugins)
    given_io = _collect(problems, _checkpoint_plugin, plugins)
    environment = detect() if given_environment is None else given_environment
    chosen = _collect(problems, _resolve_accelerator, accelerator)
    if chosen is not None:
        devices = _devices_from_environment(devices, environment)
    device_indices = _collect(problems, chosen.parse_devices, devices) if chosen is not None else None
    parallel = _collect(problems, _resolve_strategy, strategy)
    _collect(problems, _check_num_nodes, num_nodes)
    # With other flags already wrong, only check the precision: building it may warn about a run that won't happen.
    plugin = _collect(problems, _resolve_precision, precision, plugins, None if problems else chosen)
    multi = num_nodes != 1 or (device_indices is not None and len(device_indices) > 1)
    multi = multi or (environment.creates_processes_externally and environment.world_size() > 1)
    single_named = isinstance(strategy, str) and strategy.strip().lower() == "single_device"
    if (single_named or isinstance(strategy, SingleDeviceStrategy)) and multi:
        problems.append(
            f"strategy='single_device' runs one process, but devices={devices!r} with num_nodes={num_nodes!r} asks "
            "for several; use strategy='ddp' (or 'ddp_spawn') or devices=1"
        )
    if isinstance(plugin, FSDPPrecision) and not _is_fsdp(parallel):
        problems.append(f"the precision plugin {plugin!r} shards with FSDP: it needs strategy='fsdp' (FSDPStrategy)")
    if sync_batchnorm and parallel is None and not multi and not problems:
        problems.append("sync_batchnorm=True needs a multi-process strategy such as strategy='ddp'")
    if given_io is not None and isinstance(strategy, Strategy) and strategy.checkpoint_io is not DEFAULT_CHECKPOINT_IO:
        problems.append("checkpoint_io set through both strategy class and plugins, choose one")
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else "Invalid device flags:\n- " + "\n- ".join(problems))
    assert chosen is not None and device_indices is not None and isinstance(plugin, Precision)
    if parallel is None and multi:
        parallel = DDPStrategy(start_method="popen")  # Lightning's choice for several processes under "auto"
    if parallel is None:
        single = strategy if isinstance(strategy, SingleDeviceStrategy) else None
        if single is None:
            single = SingleDeviceStrategy(chosen.device_for(device_indices[0]), chosen, precision_plugin=plugin)
        single.finish_setup(chosen, plugin)
        single.cluster_environment = environment
        if given_io is not None:
            single.checkpoint_io = given_io
        return single
    if given_io is not None:
        parallel.checkpoint_io = given_io  # a sharded strategy refuses it
    if parallel.cluster_environment is None:
        parallel.cluster_environment = environment
    parallel.num_nodes = num_nodes
    parallel.sync_batchnorm = sync_batchnorm
    parallel.finish_setup(chosen, [chosen.device_for(index) for index in device_indices], plugin)
    return parallel


def _is_fsdp(strategy: Strategy | None) -> bool:
    from devices.fsdp import FSDPStrategy  # only asked with an FSDPPrecision plugin, which needs FSDP2 anyway

    return isinstance(strategy, FSDPStrategy)


def _devices_from_environment(devices: Any, environment: ClusterEnvironment) -> Any:
    """Under torchrun or SLURM, `devices="auto"` means the processes the launcher started on this node."""
    per_node = environment.processes_per_node() if devices == "auto" else None
    return devices if per_node is None else per_node


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
        raise ValueError(f"Received both `precision={value}` and `plugins={given!r}`. Choose one.")
    if accelerator is None:
        canonical_precision(value)
        return None
    if given is None:
        return resolve_precision(value, accelerator.name)
    if isinstance(given, FSDPPrecision):
        given.on_accelerator(accelerator.name)
    if isinstance(given, MixedPrecision) and given.device != accelerator.name:
        raise ValueError(
            f"the precision plugin {given!r} autocasts on {given.device!r}, but the run uses accelerator "
            f"{accelerator.name!r}; build it with device={accelerator.name!r}"
        )
    return given


def _plugin_list(plugins: Any) -> list[Any]:
    if plugins is None:
        return []
    return list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]


def _check_plugin_types(plugins: Any) -> None:
    for item in _plugin_list(plugins):
        if not isinstance(item, (Precision, CheckpointIO, ClusterEnvironment)):
            raise ValueError(
                f"Found invalid type for plugin {item!r}. Expected one of: Precision, CheckpointIO, ClusterEnvironment "
                "(Lightning's LayerSync is the sync_batchnorm=True flag here)"
            )


def _checkpoint_plugin(plugins: Any) -> CheckpointIO | None:
    found = [item for item in _plugin_list(plugins) if isinstance(item, CheckpointIO)]
    if len(found) > 1:
        raise ValueError(
            f"Received multiple values for CheckpointIO flags in `plugins`: {found!r}. Expected one value for each "
            "type at most."
        )
    return found[0] if found else None


def _cluster_environment(plugins: Any) -> ClusterEnvironment | None:
    """A cluster environment given in `plugins` (e.g. SLURMEnvironment with its requeue signal)."""
    found = [item for item in _plugin_list(plugins) if isinstance(item, ClusterEnvironment)]
    if len(found) > 1:
        raise ValueError(f"plugins={plugins!r} holds {len(found)} cluster environments; give at most one")
    return found[0] if found else None


def _precision_plugin(plugins: Any) -> Precision | None:
    items = [item for item in _plugin_list(plugins) if isinstance(item, Precision)]
    if len(items) > 1:
        raise ValueError(f"plugins={plugins!r} holds {len(items)} precision plugins; give at most one")
    return items[0] if items else None


def _resolve_accelerator(value: str | Accelerator) -> Accelerator:
    if isinstance(value, Accelerator):
        if not value.is_available():
            raise ValueError(f"accelerator={value!r} was given, but its hardware is not available in this process")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{_invalid_accelerator(value)}; use {_ALLOWED_ACCELERATORS}")
    name = value.strip().lower()
    name = _ACCELERATOR_ALIASES.get(name, name)
    if name == "auto":
        # Lightning's "auto" would also pick MPS or TPU; here it picks the best accelerator we can run.
        return CUDAAccelerator() if CUDAAccelerator.is_available() else CPUAccelerator()
    if name in _ACCELERATORS_NOT_YET:
        raise ValueError(f"accelerator={value!r} is recognised but not supported yet; use {_ALLOWED_ACCELERATORS}")
    if name not in _ACCELERATORS:
        raise ValueError(f"{_invalid_accelerator(value)}; use {_ALLOWED_ACCELERATORS}")
    kind = _ACCELERATORS[name]
    if not kind.is_available():
        raise ValueError(
            f"accelerator={value!r} was requested, but CUDA is not available "
            "(torch.cuda.is_available() is False); use accelerator='cpu' or 'auto'"
        )
    return kind()


def _invalid_accelerator(value: Any) -> str:
    return f"You selected an invalid accelerator name: `accelerator={value!r}`. Available names are: auto, cpu, cuda"


def _invalid_strategy(value: Any) -> str:
    return (
        f"You selected an invalid strategy name: `strategy={value!r}`. It must be either a string or an instance of "
        "`statemachine.strategies.Strategy`"
    )


def _resolve_strategy(value: Any) -> ParallelStrategy | None:
    """A multi-process strategy for its names and instances; None for the single-device choices."""
    if isinstance(value, ParallelStrategy):
        return value
    if isinstance(value, SingleDeviceStrategy):
        return None  # one process, on the device it names
    allowed = f"use one of {list(_STRATEGIES)} or a DDPStrategy, FSDPStrategy or ModelParallelStrategy instance"
    if not isinstance(value, str):
        raise ValueError(f"{_invalid_strategy(value)}; {allowed}")
    name = value.strip().lower()
    if name in ("auto", "single_device"):
        return None
    if name in _DDP_NAMES:
        method, find_unused = _DDP_NAMES[name]
        if find_unused:
            return DDPStrategy(start_method=method, find_unused_parameters=True)
        return DDPStrategy(start_method=method)
    if name in _FSDP_NAMES:
        from devices.fsdp import FSDPStrategy  # loaded on first use: importing FSDP2 is slow, most runs skip it

        return FSDPStrategy(cpu_offload=name == "fsdp_cpu_offload")
    if name.startswith(_UNSUPPORTED_PREFIXES):
        raise ValueError(f"strategy={value!r} is a Lightning strategy this project does not support; {allowed}")
    raise ValueError(f"{_invalid_strategy(value)}; {allowed}")


def _check_num_nodes(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"`num_nodes` must be a positive integer, but got {value!r}. num_nodes={value!r}: use an int >= 1"
        )
