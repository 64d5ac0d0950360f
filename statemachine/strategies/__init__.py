"""`lightning.pytorch.strategies`: one device; DDP over processes (`DDPStrategy(timeout=..., **ddp_kwargs)`); the
sharded strategies on FSDP2 (`FSDPStrategy`, `ModelParallelStrategy`, on CUDA and on the CPU); DeepSpeed and XLA
are not built."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "DDPStrategy": "devices.ddp",
    "FSDPStrategy": "devices.fsdp",
    "ModelParallelStrategy": "devices.model_parallel",
    "ParallelStrategy": "devices.parallel",
    "SingleDeviceStrategy": "devices.strategy",
    "Strategy": "devices.strategy",
}
_NOT_BUILT = (
    "DeepSpeedStrategy",
    "SingleDeviceXLAStrategy",
    "XLAStrategy",
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, dict.fromkeys(_NOT_BUILT, "this strategy is not built"))
