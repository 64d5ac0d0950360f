"""`lightning.pytorch.utilities`: rank-zero helpers, `grad_norm`, `CombinedLoader`, and the other helpers users
import from it."""

from statemachine._exports import lazy_exports

_EXPORTS = {
    "AttributeDict": "stages.hparams",
    "CombinedLoader": "stages.combined_loader",
    "grad_norm": "statemachine.utilities.grads",
    "move_data_to_device": "statemachine.utilities.apply_func",
    "rank_zero_debug": "statemachine.utilities.rank_zero",
    "rank_zero_deprecation": "statemachine.utilities.rank_zero",
    "rank_zero_info": "statemachine.utilities.rank_zero",
    "rank_zero_only": "statemachine.utilities.rank_zero",
    "rank_zero_warn": "statemachine.utilities.rank_zero",
    "is_overridden": "statemachine.utilities.model_helpers",
    "is_picklable": "stages.hparams",
    "suggested_max_num_workers": "stages.data",
}
_NOT_SUPPORTED = {
    "measure_flops": "FLOP counting is not built",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _NOT_SUPPORTED)
