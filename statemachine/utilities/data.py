"""`lightning.pytorch.utilities.data`: what a loader's length says across ranks."""

from stages.data import has_len_all_ranks

__all__ = ["has_len_all_ranks"]
