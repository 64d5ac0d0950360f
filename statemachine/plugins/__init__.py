"""`lightning.pytorch.plugins`: the precision plugins, checkpoint I/O plugins and cluster environments a Trainer
accepts through `plugins=`; the other precision plugins and asynchronous checkpoint saving are not built yet."""

from statemachine._exports import lazy_exports

_PRECISION = "statemachine.plugins.precision"
_ENVIRONMENTS = "statemachine.plugins.environments"
_IO = "statemachine.plugins.io"
_EXPORTS = {
    **dict.fromkeys(("DoublePrecision", "FSDPPrecision", "HalfPrecision", "MixedPrecision", "Precision"), _PRECISION),
    **dict.fromkeys(
        ("ClusterEnvironment", "LightningEnvironment", "SLURMEnvironment", "TorchElasticEnvironment"), _ENVIRONMENTS
    ),
    **dict.fromkeys(("CheckpointIO", "TorchCheckpointIO"), _IO),
}
_NOT_BUILT = (
    "AsyncCheckpointIO",
    "BitsandbytesPrecision",
    "DeepSpeedPrecision",
    "TransformerEnginePrecision",
    "XLAPrecision",
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, dict.fromkeys(_NOT_BUILT, "this Trainer plugin is not built"))
