"""`lightning.pytorch.utilities.combined_loader`."""

from stages.combined_loader import CombinedLoader

__all__ = ["CombinedLoader"]
