"""`rich` is an optional extra: the callbacks that draw with it refuse to start without it."""

from __future__ import annotations


def require_rich(user: str) -> None:
    try:
        import rich  # noqa: F401
    except ImportError as error:
        raise ModuleNotFoundError(
            f"{user} requires the `rich` package, which is not installed; install it with "
            "`pip install 'statemachine-trainer[rich]'` (or `pip install rich`)"
        ) from error
