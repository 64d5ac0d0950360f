"""`lightning.pytorch.plugins.io`: checkpoint I/O plugins, given in `Trainer(plugins=[...])`."""

from devices.checkpoint_plugin import CheckpointIO, TorchCheckpointIO
from statemachine._exports import lazy_exports

__all__ = ["CheckpointIO", "TorchCheckpointIO"]
__getattr__, __dir__ = lazy_exports(
    __name__,
    {},
    {"AsyncCheckpointIO": "asynchronous checkpoint saving is not built", "XLACheckpointIO": "XLA is not supported"},
)
