"""`lightning.pytorch.demos`: the small models and datasets Lightning's examples and bug reports use.

Everything here works offline. The datasets Lightning downloads are generated instead, and are not the real
ones: `WikiText2` is a corpus of made-up words from a fixed grammar, `MNIST` (in `mnist_datamodule`) serves
synthetic digit-like images. Their `download=True` generates the files when missing; nothing is downloaded.
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
    "LightningLSTM": "statemachine.demos.lstm",
    "SequenceSampler": "statemachine.demos.lstm",
    "SimpleLSTM": "statemachine.demos.lstm",
    "LightningTransformer": "statemachine.demos.transformer",
    "Transformer": "statemachine.demos.transformer",
    "WikiText2": "statemachine.demos.transformer",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
