"""Binding a table to code: every guard, callback and handler name resolved to the function its path names.

The table (`statemachine.engine.table`) is data and imports nothing that runs; this is where its names meet code. A
name that does not resolve is an error naming every such name, raised when a trainer is built on the table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statemachine.engine.table import MachineTable


@dataclass(frozen=True)
class Binding:
    guards: dict[str, Callable[[Any], Any]]
    callbacks: dict[str, Callable[[Any], Any]]
    handlers: dict[str, Callable[[Any], str | None]]


_BOUND: dict[str, Binding] = {}


def bind(table: MachineTable) -> Binding:
    """The table's functions, imported once per table and process."""
    binding = _BOUND.get(table.digest)
    if binding is None:
        binding = _BOUND[table.digest] = _resolve_all(table)
    return binding


def _resolve_all(table: MachineTable) -> Binding:
    problems: list[str] = []
    guards = _resolve_kind("guard", {g.name: g.path for g in table.guards}, problems)
    callbacks = _resolve_kind("callback", table.callbacks, problems)
    handlers = _resolve_kind("handler", table.handlers, problems)
    if problems:
        raise ValueError(f"table {table.name!r} does not resolve:\n  " + "\n  ".join(problems))
    return Binding(guards=guards, callbacks=callbacks, handlers=handlers)


def _resolve_kind(kind: str, paths: dict[str, str], problems: list[str]) -> dict[str, Callable[..., Any]]:
    resolved = {}
    for name, path in paths.items():
        try:
            resolved[name] = resolve(path)
        except (ImportError, AttributeError, ValueError) as error:
            problems.append(f"{kind} {name!r}: {error}")
    return resolved


def resolve(path: str) -> Callable[..., Any]:
    """The callable at `module:attribute` (the attribute may be dotted, e.g. a class's method)."""
    target = resolve_object(path)
    if not callable(target):
        raise ValueError(f"{path!r} names {type(target).__name__}, not a function")
    return target


def resolve_object(path: str) -> Any:
    """The object at `module:attribute`."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{path!r} is not an import path of the form 'module:attribute'")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise AttributeError(f"{path!r}: {module_name} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target
