"""`lightning.pytorch.demos`: the small models and random datasets Lightning's examples and bug reports use.

Everything here works offline on synthetic data; the demos that download a dataset (MNIST, WikiText-2) are
refused with `NotSupportedYetError`.
"""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "BoringDataModule": "statemachine.demos.boring_classes",
    "BoringModel": "statemachine.demos.boring_classes",
    "DemoModel": "statemachine.demos.boring_classes",
    "ManualOptimBoringModel": "statemachine.demos.boring_classes",
    "RandomDataset": "statemachine.demos.boring_classes",
    "RandomDictDataset": "statemachine.demos.boring_classes",
    "RandomIterableDataset": "statemachine.demos.boring_classes",
    "RandomIterableDatasetWithLen": "statemachine.demos.boring_classes",
    "LightningTransformer": "statemachine.demos.transformer",
    "Transformer": "statemachine.demos.transformer",
}
_DOWNLOADS = "it downloads its dataset; use your own data or the synthetic datasets in statemachine.demos"
_NOT_SUPPORTED = {"WikiText2": _DOWNLOADS, "MNIST": _DOWNLOADS, "MNISTDataModule": _DOWNLOADS}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
