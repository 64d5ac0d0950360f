"""`lightning.pytorch.plugins`: precision, checkpoint-I/O and cluster plugins are not built yet
(`Trainer(plugins=...)` is refused; `precision="32-true"` is the supported precision)."""

from statemachine._exports import lazy_exports

_NAMES = (
    "AsyncCheckpointIO",
    "BitsandbytesPrecision",
    "CheckpointIO",
    "ClusterEnvironment",
    "DeepSpeedPrecision",
    "DoublePrecision",
    "FSDPPrecision",
    "HalfPrecision",
    "LightningEnvironment",
    "MixedPrecision",
    "Precision",
    "SLURMEnvironment",
    "TorchCheckpointIO",
    "TorchElasticEnvironment",
    "TransformerEnginePrecision",
    "XLAPrecision",
)
__all__: list[str] = []
__getattr__, __dir__ = lazy_exports(__name__, {}, dict.fromkeys(_NAMES, "Trainer plugins are not built"))
