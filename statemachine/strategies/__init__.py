"""`lightning.pytorch.strategies`: one device, or DDP over processes (`DDPStrategy(timeout=..., **ddp_kwargs)`);
the sharded and accelerator-specific strategies are not built yet."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "DDPStrategy": "devices.ddp",
    "ParallelStrategy": "devices.parallel",
    "SingleDeviceStrategy": "devices.strategy",
    "Strategy": "devices.strategy",
}
_NOT_BUILT = (
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "SingleDeviceXLAStrategy",
    "XLAStrategy",
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, dict.fromkeys(_NOT_BUILT, "this strategy is not built"))
