"""`lightning.pytorch.strategies`: strategy objects are not built yet; `Trainer(strategy="auto")` runs one device."""

from statemachine._exports import lazy_exports

_NAMES = (
    "DDPStrategy",
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "ParallelStrategy",
    "SingleDeviceStrategy",
    "SingleDeviceXLAStrategy",
    "Strategy",
    "XLAStrategy",
)
_REASON = "strategy objects are not built; pass strategy='auto' (one process, one device)"
__all__: list[str] = []
__getattr__, __dir__ = lazy_exports(__name__, {}, dict.fromkeys(_NAMES, _REASON))
