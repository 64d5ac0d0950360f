"""`lightning.pytorch.core.hooks`: `DataHooks`, which LightningModule and LightningDataModule share. Lightning
splits the module's other hooks into mixin classes too; here they are declared on LightningModule itself (and
Callback), so those mixins are refused with a pointer to them."""

from statemachine._exports import lazy_exports

_EXPORTS = {"DataHooks": "stages.data_hooks"}
_ON_MODULE = "the hooks are declared on LightningModule directly; subclass LightningModule"
_NOT_SUPPORTED = {"CheckpointHooks": _ON_MODULE, "ModelHooks": _ON_MODULE}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
