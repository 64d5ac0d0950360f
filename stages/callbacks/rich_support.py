"""`rich` is an optional extra: the callbacks that draw with it refuse to start without it."""

from __future__ import annotations

import importlib.util


def require_rich(user: str) -> None:
    if importlib.util.find_spec("rich") is None:
        raise ModuleNotFoundError(
            f"{user} requires the `rich` package, which is not installed; install it with "
            "`pip install 'statemachine-trainer[rich]'` (or `pip install rich`)"
        )
