"""`lightning.pytorch.core.hooks`: Lightning splits the module's hooks into mixin classes; here every hook is
declared on LightningModule itself (and Callback), so the mixins are refused with a pointer to them."""

from statemachine._exports import lazy_exports

_ON_MODULE = "the hooks are declared on LightningModule directly; subclass LightningModule"
_NOT_SUPPORTED = {"CheckpointHooks": _ON_MODULE, "DataHooks": _ON_MODULE, "ModelHooks": _ON_MODULE}
__all__: list[str] = []
__getattr__, __dir__ = lazy_exports(__name__, {}, _NOT_SUPPORTED)
