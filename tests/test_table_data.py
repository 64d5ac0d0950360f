"""The table is data: importing it loads no torch and nothing that imports the Trainer; its names are resolved
where it is bound to code; the control plane's modules import each other without a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO

import statemachine as L
from statemachine.engine.binding import bind


def test_importing_the_table_loads_no_torch_and_no_trainer() -> None:
    code = (
        "import sys, statemachine.engine.table; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('torch', 'stages', 'devices') or m == 'statemachine.trainer'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_binding_resolves_every_name_of_the_built_in_table() -> None:
    binding = bind(L.TABLE)
    assert set(binding.guards) == {g.name for g in L.TABLE.guards}
    assert set(binding.callbacks) == set(L.TABLE.callbacks)
    assert set(binding.handlers) == set(L.TABLE.handlers)
    assert all(callable(f) for kind in (binding.guards, binding.callbacks, binding.handlers) for f in kind.values())


def _top_level_imports(path: Path) -> set[str]:
    """Modules of the project a file imports when it is imported (not under TYPE_CHECKING, not in functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_control_plane_has_no_import_circle() -> None:
    modules = {
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): path
        for path in (REPO / "statemachine").rglob("*.py")
    }
    graph = {
        name: {m for m in _top_level_imports(path) if m in modules and m != name} for name, path in modules.items()
    }
    cycles = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        for target in sorted(graph[node]):
            if target in stack:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in done:
                visit(target, [*stack, target], done)
        done.add(node)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name], done)
    assert cycles == []
