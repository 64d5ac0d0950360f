"""Where the packages' INFO messages go when the user has set up no logging."""

from __future__ import annotations

import logging

# The loggers of this project's packages: the trainer's messages come from all three.
_PACKAGE_LOGGERS = ("statemachine", "stages", "devices")
_console_decided = False


def show_info_on_the_console() -> None:
    """Once per process, at the first Trainer or `seed_everything`: when the user has configured no logging (the
    root logger has no handler), the packages' loggers write their INFO messages to stderr themselves, as Lightning
    does for its own logger. Otherwise the user's logging setup decides what is shown, and nothing here changes it."""
    global _console_decided
    if _console_decided:
        return
    _console_decided = True
    if logging.getLogger().hasHandlers():
        return
    handler = logging.StreamHandler()
    for name in _PACKAGE_LOGGERS:
        package = logging.getLogger(name)
        if package.handlers or package.level != logging.NOTSET:
            continue  # the user configured this one
        package.setLevel(logging.INFO)
        package.addHandler(handler)
        package.propagate = False
