"""An import-linter contract type of this project's: no import circle between modules, anywhere in the packages.

import-linter's own `acyclic_siblings` treats a subpackage as one unit, which rules out a package whose modules are
used by a sibling that some other module of the package uses in turn (a callback built on the loops next to the
Callback base class the loops call). The rule that matters to a reader is per module: following imports from a
module never leads back to it. `make lint` runs it with the other contracts (`lint-imports`, configured in
pyproject.toml).
"""

from __future__ import annotations

from typing import Any

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class ModuleCyclesContract(Contract):
    """No strongly connected group of two or more modules under `packages` (imports under TYPE_CHECKING count)."""

    type_name = "no_module_cycles"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        roots = tuple(str(package) for package in self.packages)
        modules = {m for m in graph.modules if m.split(".")[0] in roots}
        edges = {m: sorted(t for t in graph.find_modules_directly_imported_by(m) if t in modules) for m in modules}
        cycles = [sorted(group) for group in strongly_connected(edges) if len(group) > 1]
        return ContractCheck(kept=not cycles, warnings=[], metadata={"cycles": sorted(cycles)})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"modules that import each other: {', '.join(cycle)}", bold=False)
            output.new_line()


def strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (import graphs are deep enough to exhaust recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Any]] = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            following = next(successors, None)
            if following is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    groups.append(group)
            elif following not in index:
                index[following] = low[following] = len(index)
                stack.append(following)
                on_stack.add(following)
                work.append((following, iter(edges[following])))
            elif following in on_stack:
                low[node] = min(low[node], index[following])
    return groups
