"""`lightning.pytorch.utilities.parsing`."""

from stages.hparams import AttributeDict
from statemachine.tuner.attributes import lightning_getattr, lightning_hasattr, lightning_setattr

__all__ = ["AttributeDict", "lightning_getattr", "lightning_hasattr", "lightning_setattr"]
