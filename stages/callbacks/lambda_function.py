"""LambdaCallback: a callback built from plain functions, one keyword per hook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stages.callbacks.callback import Callback

Hook = Callable[..., Any] | None


class LambdaCallback(Callback):
    """Each given function becomes that hook of this instance and is called with the hook's usual arguments
    (`trainer, pl_module, ...`); hooks left as None keep the no-op default and are never called."""

    def __init__(
        self,
        setup: Hook = None,
        teardown: Hook = None,
        on_fit_start: Hook = None,
        on_fit_end: Hook = None,
        on_sanity_check_start: Hook = None,
        on_sanity_check_end: Hook = None,
        on_train_batch_start: Hook = None,
        on_train_batch_end: Hook = None,
        on_train_epoch_start: Hook = None,
        on_train_epoch_end: Hook = None,
        on_validation_epoch_start: Hook = None,
        on_validation_epoch_end: Hook = None,
        on_test_epoch_start: Hook = None,
        on_test_epoch_end: Hook = None,
        on_validation_batch_start: Hook = None,
        on_validation_batch_end: Hook = None,
        on_test_batch_start: Hook = None,
        on_test_batch_end: Hook = None,
        on_train_start: Hook = None,
        on_train_end: Hook = None,
        on_validation_start: Hook = None,
        on_validation_end: Hook = None,
        on_test_start: Hook = None,
        on_test_end: Hook = None,
        on_exception: Hook = None,
        on_save_checkpoint: Hook = None,
        on_load_checkpoint: Hook = None,
        on_before_backward: Hook = None,
        on_after_backward: Hook = None,
        on_before_optimizer_step: Hook = None,
        on_before_zero_grad: Hook = None,
        on_predict_start: Hook = None,
        on_predict_end: Hook = None,
        on_predict_batch_start: Hook = None,
        on_predict_batch_end: Hook = None,
        on_predict_epoch_start: Hook = None,
        on_predict_epoch_end: Hook = None,
    ) -> None:
        given = {name: value for name, value in locals().items() if name not in ("self", "__class__")}
        not_callable = sorted(name for name, value in given.items() if value is not None and not callable(value))
        if not_callable:
            raise TypeError(f"LambdaCallback hooks must be callables; not callable: {not_callable}")
        for name, function in given.items():
            if function is not None:
                setattr(self, name, function)
