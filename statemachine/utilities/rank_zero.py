"""Rank-zero helpers (`lightning.pytorch.utilities.rank_zero`): the trainer's own, so `rank_zero_only.rank` is the
one the strategy sets for each process."""

from stages.rank_zero import rank_zero_debug, rank_zero_deprecation, rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["rank_zero_debug", "rank_zero_deprecation", "rank_zero_info", "rank_zero_only", "rank_zero_warn"]
