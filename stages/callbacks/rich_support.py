"""`rich` is an optional extra: the callbacks that draw with it refuse to start without it."""

from __future__ import annotations

import importlib.util
import sys


def rich_available() -> bool:
    """Whether `rich` is installed (asked without importing it): the Trainer's default bar and summary use it then.
    Once it is imported the answer is a lookup: every Trainer asks, and a search of the import path costs more."""
    return sys.modules.get("rich") is not None or importlib.util.find_spec("rich") is not None


def require_rich(user: str) -> None:
    if not rich_available():
        raise ModuleNotFoundError(
            f"{user} requires the `rich` package, which is not installed; install it with "
            "`pip install 'statemachine-trainer[rich]'` (or `pip install rich`)"
        )
