"""The project's warnings have their own categories, which this suite turns into errors; other libraries' do not."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest
from conftest import REPO

import statemachine as L
from devices.warning_types import DeviceWarning
from stages.exceptions import TrainerWarning
from stages.saving import MissingHparamsFileWarning

# Categories a project warning may carry: its own, or one that is not a UserWarning (e.g. RuntimeWarning).
# MissingHparamsFileWarning is a TrainerWarning (and a RuntimeWarning, as Lightning's warning there is).
ALLOWED = {
    "TrainerWarning",
    "PossibleUserWarning",
    "DeviceWarning",
    "RuntimeWarning",
    "DeprecationWarning",
    "MissingHparamsFileWarning",
    "LightningAliasWarning",
}


def _warn_calls(path: Path) -> list[tuple[int, str | None]]:
    """(line, category name) of every warnings.warn call; None when no category is given (a UserWarning)."""
    calls = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        func = node.func if isinstance(node, ast.Call) else None
        if not (
            isinstance(func, ast.Attribute) and func.attr == "warn" and getattr(func.value, "id", "") == "warnings"
        ):
            continue
        category = (
            node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "category"), None)
        )
        calls.append((node.lineno, category.id if isinstance(category, ast.Name) else None))
    return calls


def test_every_project_warning_is_a_trainer_warning() -> None:
    # A plain UserWarning would slip past the suite's error filter, so a false warning could not fail a test.
    files = [p for package in ("statemachine", "stages", "devices") for p in sorted((REPO / package).rglob("*.py"))]
    # rank_zero_warn issues the user's own warnings, in the category the user gives (UserWarning by default).
    user_warnings = {"statemachine/utilities/rank_zero.py", "stages/rank_zero.py"}
    files = [p for p in files if p.relative_to(REPO).as_posix() not in user_warnings]
    calls = {f"{p.relative_to(REPO)}:{line}": category for p in files for line, category in _warn_calls(p)}
    assert len(calls) > 10  # the scan finds the warnings that exist
    assert {where: category for where, category in calls.items() if category not in ALLOWED} == {}


def test_the_project_categories_are_user_warnings_as_in_lightning() -> None:
    assert issubclass(L.PossibleUserWarning, TrainerWarning) and issubclass(TrainerWarning, UserWarning)
    assert issubclass(DeviceWarning, UserWarning)
    assert issubclass(MissingHparamsFileWarning, TrainerWarning) and issubclass(
        MissingHparamsFileWarning, RuntimeWarning
    )


def test_suite_errors_on_project_warnings_only() -> None:
    # The filters here are pyproject's: the project's category raises, a library's UserWarning is recorded.
    with pytest.raises(TrainerWarning, match="ours"):
        warnings.warn("ours", TrainerWarning, stacklevel=1)
    with pytest.raises(L.PossibleUserWarning, match="probably"):
        warnings.warn("probably not meant", L.PossibleUserWarning, stacklevel=1)
    with pytest.raises(DeviceWarning, match="hardware"):
        warnings.warn("hardware says", DeviceWarning, stacklevel=1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn("from a library", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["from a library"]
