"""`lightning.pytorch.demos.mnist_datamodule`: refused, because MNIST is downloaded from the internet."""

from statemachine._exports import lazy_exports

_DOWNLOADS = "it downloads MNIST; use your own data or the synthetic datasets in statemachine.demos"
__all__: list[str] = []
__getattr__, __dir__ = lazy_exports(__name__, {}, {"MNIST": _DOWNLOADS, "MNISTDataModule": _DOWNLOADS})
