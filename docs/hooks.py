"""MkDocs hooks: the state diagrams and their edge listings, rendered from the table at build time.

Nothing here is copied by hand and nothing generated is written into `docs/`: `on_files` renders one SVG per view
of the table (the overview and one per trainer function, as `python -m statemachine.engine.diagram` does) with
the project's own renderer and adds them to the site as generated files; `on_page_markdown` replaces a marker
comment in a page with the generated Markdown (each diagram, the table's edges under it one per line, the
handler of each running state and the file it lives in).

The page text is a pure function of the table (`diagram_page`, `tuner_page`), so a test can check it without a
build (tests/test_docs.py loads this file by its path).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import graphviz

from statemachine.engine.diagram import INSTALL_DOT, View, build_graph, views
from statemachine.engine.table import TABLE, MachineTable, StateSpec, TransitionSpec

REPO = Path(__file__).resolve().parents[1]

SVG_DIR = "assets/diagrams"  # where the site serves the generated SVGs, relative to the docs root
DIAGRAMS_MARKER = "<!-- generated: state diagrams -->"
TUNER_MARKER = "<!-- generated: tuner diagram -->"
TUNER_SVG = "tuner"

_log = logging.getLogger("mkdocs.hooks.statemachine")


# ---- the generated Markdown (pure functions of the table) --------------------------------------------------


def edge_line(t: TransitionSpec) -> str:
    """One edge: `trigger: source -> dest [guard] / callbacks` (the callbacks in the order they run)."""
    return t.key if not t.callbacks else f"{t.key} / {', '.join(t.callbacks)}"


def view_transitions(table: MachineTable, view: View) -> list[TransitionSpec]:
    """The edges a view draws, in table order: all of them for the overview, else those touching the function's
    states (the same selection as the renderer's)."""
    if view.fn is None:
        return list(table.transitions)
    own = {state.name for state in table.states if state.fn == view.fn}
    return [t for t in table.transitions if t.source in own or t.dest in own]


def view_states(table: MachineTable, view: View) -> list[StateSpec]:
    """The running states a view shows, in table order."""
    if view.fn is None:
        return [state for state in table.states if not state.resting]
    return [state for state in table.states if state.fn == view.fn and not state.resting]


def module_file(path: str) -> str:
    """The repository file of an import path `package.module:attribute` (`stages/training.py`)."""
    module = path.partition(":")[0]
    base = Path(*module.split("."))
    as_package = base / "__init__.py"
    if not (REPO / base.with_suffix(".py")).is_file() and (REPO / as_package).is_file():
        return as_package.as_posix()
    return base.with_suffix(".py").as_posix()


def handler_rows(table: MachineTable, states: Iterable[StateSpec]) -> list[str]:
    """A Markdown table: each running state, its handler, the function it names and the file it lives in."""
    rows = ["| state | handler | function | file |", "| --- | --- | --- | --- |"]
    for state in states:
        path = table.handlers.get(state.handler or "", "")
        function = path.partition(":")[2]
        rows.append(f"| `{state.name}` | `{state.handler}` | `{function}` | `{module_file(path)}` |")
    return rows


def guard_rows(table: MachineTable) -> list[str]:
    rows = ["| guard | reduced across ranks | what it says | file |", "| --- | --- | --- | --- |"]
    for guard in table.guards:
        collective = {"any": "any rank (∃)", "all": "all ranks (∀)"}.get(guard.collective or "", "no")
        rows.append(f"| `{guard.name}` | {collective} | {guard.doc} | `{module_file(guard.path)}` |")
    return rows


def callback_files(table: MachineTable, transitions: Iterable[TransitionSpec]) -> list[str]:
    """The files the listed edges' callbacks live in, in order of first use."""
    names = dict.fromkeys(name for t in transitions for name in t.callbacks)
    return list(dict.fromkeys(module_file(table.callbacks[name]) for name in names))


def svg_name(view: View) -> str:
    return f"{SVG_DIR}/{view.name}.svg"


def _title(view: View) -> str:
    return "Overview" if view.fn is None else f"trainer.{view.fn.value}()"


def _image(alt: str, path: str) -> str:
    """The diagram, linked to itself: a wide one shrinks to the column, a click shows it full size."""
    return f"[![{alt}]({path})]({path})"


def _edge_block(table: MachineTable, transitions: list[TransitionSpec]) -> list[str]:
    files = callback_files(table, transitions)
    lines = ["```text", *(edge_line(t) for t in transitions), "```"]
    if files:
        where = ", ".join(f"`{f}`" for f in files)
        lines += [
            "",
            f"The callbacks named above live in {where}."
            if len(files) > 1
            else f"Every callback named above lives in {where}.",
        ]
    return lines


def diagram_page(table: MachineTable = TABLE) -> str:
    """The Markdown of the diagrams page: per view, its SVG, its edges one per line, its states' handlers."""
    out: list[str] = []
    for view in views(table):
        transitions = view_transitions(table, view)
        out += [f"## {_title(view)}", ""]
        if view.fn is None:
            out += [
                "The whole table; long callback chains are folded into named groups (the chain is spelled out in",
                "the listing below and in each function's diagram).",
                "",
            ]
        out += [_image(_title(view), svg_name(view)), ""]
        out += [f"Edges ({len(transitions)}), in table order (the order candidates are tried):", ""]
        out += _edge_block(table, transitions)
        out += ["", "Running states and their handlers:", "", *handler_rows(table, view_states(table, view)), ""]
        if view.fn is None:
            out += ["Guards:", "", *guard_rows(table), ""]
    return "\n".join(out)


def added_transitions(extended: MachineTable, base: MachineTable = TABLE) -> list[TransitionSpec]:
    """The edges of `extended` that `base` lacks or declares with other callbacks, in `extended`'s order."""
    return [t for t in extended.transitions if base.by_key.get(t.key) != t]


def tuner_page(tuner_table: MachineTable) -> str:
    """The Markdown of the tuner's diagram: the built-in table with the tuning states, and what they add."""
    added = added_transitions(tuner_table)
    new_states = [state for state in tuner_table.states if state.name not in TABLE.by_name]
    return "\n".join(
        [
            _image("the trainer's table with the tuning states", f"{SVG_DIR}/{TUNER_SVG}.svg"),
            "",
            f"The edges `TUNER_TABLE` adds to the built-in table ({len(added)}), in its order:",
            "",
            *_edge_block(tuner_table, added),
            "",
            "The tuning states and their handlers:",
            "",
            *handler_rows(tuner_table, new_states),
            "",
        ]
    )


def _tuner_table() -> MachineTable:
    from statemachine.tuner.table import TUNER_TABLE

    return TUNER_TABLE


def render_svgs(table: MachineTable = TABLE) -> dict[str, bytes]:
    """Every view of `table` as SVG, keyed by its path in the site."""
    return {svg_name(view): build_graph(table, view=view).pipe(format="svg") for view in views(table)}


# ---- MkDocs events -----------------------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    try:
        svgs = render_svgs(TABLE)
        svgs[f"{SVG_DIR}/{TUNER_SVG}.svg"] = build_graph(_tuner_table(), view=View()).pipe(format="svg")
    except graphviz.ExecutableNotFound as error:
        raise PluginError(f"docs/hooks.py: cannot render the state diagrams: {INSTALL_DOT}") from error
    for path, svg in svgs.items():
        files.append(File.generated(config, path, content=svg))
    _log.info("rendered %d state diagrams from table %s", len(svgs), TABLE.digest)
    return files


_GENERATED = {
    "diagrams.md": (DIAGRAMS_MARKER, lambda: diagram_page(TABLE)),
    "tuner.md": (TUNER_MARKER, lambda: tuner_page(_tuner_table())),
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    generated = _GENERATED.get(page.file.src_uri)
    if generated is None:
        return markdown
    marker, make = generated
    if marker not in markdown:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"docs/{page.file.src_uri} lost its marker {marker!r}: the generated content has no place")
    return markdown.replace(marker, make())
