"""`lightning.pytorch.utilities.exceptions`."""

from stages.exceptions import MisconfigurationException
from statemachine._exports import NotSupportedYetError

__all__ = ["MisconfigurationException", "NotSupportedYetError"]
