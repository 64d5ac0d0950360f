"""Which stage handler drives each running state.

Handlers live in `stages`; each is a function `(trainer) -> event name` that drives its own loop and returns
the trigger the driver fires next. They are named here as import paths so the table (and the diagram command)
can be loaded without importing torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

HANDLERS: dict[str, str] = {
    "fit_setup": "stages.fit_setup:run_fit_setup",
    "sanity_checking": "stages.evaluation:run_sanity_check",
    "training": "stages.training:run_training",
    "fit_validating": "stages.evaluation:run_fit_validation",
    "validating": "stages.evaluation:run_validate",
    "testing": "stages.evaluation:run_test",
    "predicting": "stages.prediction:run_predict",
}


def resolve_handler(name: str) -> Callable[[Any], str]:
    module_name, _, attribute = HANDLERS[name].partition(":")
    return getattr(importlib.import_module(module_name), attribute)
