"""`lightning.pytorch.cli`: LightningCLI is not built yet."""

from statemachine._exports import lazy_exports

_REASON = "LightningCLI (configuration files and command-line parsing) is not built"
__all__: list[str] = []
__getattr__, __dir__ = lazy_exports(__name__, {}, {"LightningCLI": _REASON, "SaveConfigCallback": _REASON})
