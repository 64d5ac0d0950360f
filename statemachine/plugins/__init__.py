"""`lightning.pytorch.plugins`: the precision plugins and cluster environments a Trainer accepts through
`plugins=`; the checkpoint-I/O and other precision plugins are not built yet."""

from statemachine._exports import lazy_exports

_PRECISION = "statemachine.plugins.precision"
_ENVIRONMENTS = "statemachine.plugins.environments"
_EXPORTS = {
    **dict.fromkeys(("DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision"), _PRECISION),
    **dict.fromkeys(
        ("ClusterEnvironment", "LightningEnvironment", "SLURMEnvironment", "TorchElasticEnvironment"), _ENVIRONMENTS
    ),
}
_NOT_BUILT = (
    "AsyncCheckpointIO",
    "BitsandbytesPrecision",
    "CheckpointIO",
    "DeepSpeedPrecision",
    "FSDPPrecision",
    "TorchCheckpointIO",
    "TransformerEnginePrecision",
    "XLAPrecision",
)
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, dict.fromkeys(_NOT_BUILT, "this Trainer plugin is not built"))
