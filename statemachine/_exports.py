"""Lazy public modules: each public name imports its home module on first use, so importing a path stays fast.

Names that Lightning has and this project does not build yet are refused with `NotSupportedYetError`, which says
so, instead of Python's bare "cannot import name".
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


class NotSupportedYetError(ImportError):
    """A Lightning name or import path this project does not provide yet."""


def lazy_exports(
    module_name: str, exports: Mapping[str, str], unsupported: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's `__getattr__` and `__dir__`: `exports` maps a name to the module defining it, `unsupported` maps
    a refused name to the reason given to the user."""
    refused = dict(unsupported or {})

    def __getattr__(name: str) -> Any:
        home = exports.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
            vars(sys.modules[module_name])[name] = value
            return value
        if name in refused:
            raise NotSupportedYetError(f"{module_name}.{name} is not supported yet: {refused[name]}")
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module_name])) | set(exports))

    return __getattr__, __dir__
