"""The architecture's rules that a reader relies on: the Trainer is a facade whose private members only
`statemachine/trainer.py` touches, the machine core runs without torch, import circles are found, and a call's
run is dropped when the call returns."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
import weakref
from pathlib import Path

from conftest import REPO, TinyModel, make_loader, quiet_trainer
from import_rules import strongly_connected

# Everything that could reach into a Trainer: the packages, and the code that shows how to use them.
_SCANNED = ("statemachine", "stages", "devices", "examples", "benchmarks", "tests")
_OWNER = REPO / "statemachine" / "trainer.py"


def _names_a_trainer(node: ast.expr) -> bool:
    """`trainer`, `self.trainer`, `run.trainer`, `self._trainer`, `pl_module.trainer`, ..."""
    if isinstance(node, ast.Name):
        return node.id.lstrip("_").endswith("trainer")
    if isinstance(node, ast.Attribute):
        return node.attr.lstrip("_").endswith("trainer")
    return False


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_trainer_reaches(source: str, filename: str) -> list[str]:
    """Each `<a trainer>._name` and `getattr(<a trainer>, "_name")` in `source`, as `file:line: text`."""
    found: list[ast.AST] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and _names_a_trainer(node.value):
            found.append(node)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and _names_a_trainer(node.args[0])
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            found.append(node)
    found.sort(key=lambda node: (node.lineno, node.col_offset))
    return [f"{filename}:{node.lineno}: {ast.unparse(node)}" for node in found]


def test_only_the_trainer_module_touches_a_trainers_private_members() -> None:
    reaches = []
    for folder in _SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path != _OWNER:
                reaches += private_trainer_reaches(path.read_text(), str(path.relative_to(REPO)))
    assert reaches == [], "only statemachine/trainer.py may use a Trainer's private members:\n" + "\n".join(reaches)


def test_the_reach_check_finds_each_form_of_a_reach() -> None:
    source = (
        "trainer._hooks.reset()\n"
        "self.trainer._metrics.log(x)\n"
        "run.trainer._flow = flow\n"
        "self._trainer._optimization\n"
        "getattr(pl_module.trainer, '_run')\n"
        "trainer.run.hooks\n"  # public: not a reach
        "self._trainer.strategy\n"  # the module's own private attribute holding a trainer: not a reach
        "trainer.__class__\n"
    )
    assert [line.split(": ", 1)[1] for line in private_trainer_reaches(source, "x.py")] == [
        "trainer._hooks",
        "self.trainer._metrics",
        "run.trainer._flow",
        "self._trainer._optimization",
        "getattr(pl_module.trainer, '_run')",
    ]


def test_the_machine_core_imports_without_torch() -> None:
    engine = sorted(path.stem for path in (REPO / "statemachine" / "engine").glob("*.py") if path.stem != "__init__")
    assert {"table", "binding", "machine", "history", "coverage", "diagram"} <= set(engine)
    code = (
        "import importlib, sys\n"
        f"for name in {engine!r}:\n"
        "    importlib.import_module(f'statemachine.engine.{name}')\n"
        "above = ('torch', 'devices', 'statemachine.trainer')\n"
        "print(sorted(m for m in sys.modules if m in above or m.split('.')[0] in above))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.strip() == "[]"


def test_the_cycle_rule_names_every_circle_and_nothing_else() -> None:
    edges = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"], "f": ["d"]}
    groups = sorted(sorted(group) for group in strongly_connected(edges) if len(group) > 1)
    assert groups == [["a", "b", "c"]]


def test_nothing_of_a_call_outlives_it(tmp_path: Path) -> None:
    # The run of a call holds its results and predictions; the trainer lets go of it when the call returns (the
    # loaders stay: `trainer.predict_dataloaders` shows them, as in Lightning).
    trainer = quiet_trainer(tmp_path)
    predictions = trainer.predict(TinyModel(), make_loader())
    assert trainer.run is None and len(predictions) == 4
    watched = [weakref.ref(batch) for batch in predictions]
    del predictions
    gc.collect()
    assert [ref() for ref in watched] == [None] * 4
