"""`lightning.pytorch.plugins`: the precision plugins a Trainer accepts through `plugins=`; the checkpoint-I/O,
cluster-environment and other precision plugins are not built yet."""

from statemachine._exports import lazy_exports

_PRECISION = "statemachine.plugins.precision"
_EXPORTS = dict.fromkeys(("DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision"), _PRECISION)
_NOT_BUILT = (
    "AsyncCheckpointIO",
    "BitsandbytesPrecision",
    "CheckpointIO",
    "ClusterEnvironment",
    "DeepSpeedPrecision",
    "FSDPPrecision",
    "LightningEnvironment",
    "SLURMEnvironment",
    "TorchCheckpointIO",
    "TorchElasticEnvironment",
    "TransformerEnginePrecision",
    "XLAPrecision",
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, dict.fromkeys(_NOT_BUILT, "this Trainer plugin is not built"))
