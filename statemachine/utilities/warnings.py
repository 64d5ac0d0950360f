"""`lightning.pytorch.utilities.warnings`."""

from stages.exceptions import PossibleUserWarning

__all__ = ["PossibleUserWarning"]
