"""`lightning.pytorch.profilers`: profilers are not built yet (`Trainer(profiler=...)` is refused)."""

from statemachine._exports import lazy_exports

_NAMES = (
    "AdvancedProfiler",
    "PassThroughProfiler",
    "Profiler",
    "PyTorchProfiler",
    "SimpleProfiler",
    "XLAProfiler",
)
__all__: list[str] = []
__getattr__, __dir__ = lazy_exports(__name__, {}, dict.fromkeys(_NAMES, "profilers are not built"))
