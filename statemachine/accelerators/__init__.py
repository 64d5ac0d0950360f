"""`lightning.pytorch.accelerators`: the accelerators `Trainer(accelerator=...)` takes as objects."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "Accelerator": "devices.accelerators",
    "CPUAccelerator": "devices.accelerators",
    "CUDAAccelerator": "devices.accelerators",
}
_NOT_SUPPORTED = {
    "MPSAccelerator": "only the CPU and CUDA accelerators are built",
    "XLAAccelerator": "only the CPU and CUDA accelerators are built",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
