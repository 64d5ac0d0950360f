"""`lightning.pytorch.core.saving`: hyperparameter files."""

from stages.saving import load_hparams_from_yaml, save_hparams_to_yaml

__all__ = ["load_hparams_from_yaml", "save_hparams_to_yaml"]
