"""Render the machine's table as a Graphviz diagram, optionally overlaid with a run's history.

    python -m statemachine.diagram                      # diagrams/trainer.{dot,svg,png}
    python -m statemachine.diagram --check              # is the committed trainer.dot fresh?
    python -m statemachine.diagram --history run.json -o run.svg

The DOT text is a pure function of the table (no timestamps, table order throughout), so the committed
`diagrams/trainer.dot` can be compared byte for byte with a fresh render.
"""

from __future__ import annotations

import argparse
import html
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import graphviz

from statemachine.enums import TrainerStatus
from statemachine.history import HistoryDump, load_history, warn_on_table_mismatch, write_atomic
from statemachine.table import TABLE, MachineTable, StateSpec, TransitionSpec

REPO_DIAGRAMS = Path(__file__).resolve().parents[1] / "diagrams"
BASENAME = "trainer"
FORMATS = ("dot", "svg", "png")
REGENERATE = "python -m statemachine.diagram"
INSTALL_DOT = "SVG/PNG need Graphviz's `dot` program (e.g. apt-get install graphviz)"

FONT = "Helvetica"
INTERRUPT_COLOR = "firebrick"
HIT_COLOR = "royalblue"
UNHIT_COLOR = "gray70"
CALLBACK_WRAP = 38  # characters per callback line on an edge label
FILL = {
    TrainerStatus.INITIALIZING: "#eeeeee",
    TrainerStatus.RUNNING: "#e3ecf8",
    TrainerStatus.FINISHED: "#e2f0d9",
    TrainerStatus.INTERRUPTED: "#f8dcdc",
}


class GraphvizMissingError(RuntimeError):
    """The DOT file was written but SVG/PNG could not be: Graphviz's `dot` program is not installed."""

    def __init__(self, written: list[str]) -> None:
        done = f"wrote {', '.join(written)}; " if written else ""
        super().__init__(f"{done}{INSTALL_DOT}")
        self.written = written


@dataclass
class _Overlay:
    """What a history dump adds to the diagram."""

    hits: Counter[str] = field(default_factory=Counter)
    last_state: str | None = None
    raised: dict[str, str] = field(default_factory=dict)  # state -> what went wrong there

    @classmethod
    def from_dump(cls, dump: HistoryDump, table: MachineTable) -> _Overlay:
        overlay = cls(hits=Counter(r.transition for r in dump.records if r.transition is not None))
        if dump.records:
            overlay.last_state = dump.records[-1].end_state
        for record in dump.records:
            # The driver interrupts from the state whose stage raised; a failed trigger carries its own error.
            if record.exception is not None:
                overlay.raised[record.source] = f"raised {record.exception.type}"
            elif record.dest is not None and _interrupts(table, record.dest):
                overlay.raised.setdefault(record.source, "interrupted here")
        return overlay


def _interrupts(table: MachineTable, dest: str) -> bool:
    state = table.by_name.get(dest)
    return state is not None and state.status == TrainerStatus.INTERRUPTED


# ---- graph ------------------------------------------------------------------------------------------------


def build_graph(table: MachineTable = TABLE, overlay: HistoryDump | None = None) -> graphviz.Digraph:
    """The table as a Digraph; with `overlay`, the dump's hit counts, last state and failing states."""
    if overlay is not None:
        warn_on_table_mismatch(overlay, table)
    marks = _Overlay.from_dump(overlay, table) if overlay is not None else None
    graph = graphviz.Digraph(BASENAME, graph_attr=_graph_attrs(table, marks))
    graph.attr("node", fontname=FONT, fontsize="11", shape="box", style="rounded,filled", margin="0.15,0.06")
    graph.attr("edge", fontname=FONT, fontsize="9", color="gray35", arrowsize="0.7")
    _add_initial(graph, table)
    _add_states(graph, table, marks)
    _add_edges(graph, table, marks)
    return graph


def _graph_attrs(table: MachineTable, marks: _Overlay | None) -> dict[str, str]:
    title = f"trainer state machine  (table {table.digest})"
    if marks is not None:
        title += f"\nrun overlay: edge hit counts, last state {marks.last_state or '-'}"
    return {
        "compound": "true",
        "rankdir": "TB",
        "nodesep": "0.5",
        "ranksep": "0.55",
        "fontname": FONT,
        "fontsize": "13",
        "labelloc": "t",
        "label": title,
    }


def _add_initial(graph: graphviz.Digraph, table: MachineTable) -> None:
    graph.node("__initial__", label="", shape="circle", style="filled", fillcolor="black", width="0.16")
    graph.edge("__initial__", table.initial, arrowsize="0.6")


def _add_states(graph: graphviz.Digraph, table: MachineTable, marks: _Overlay | None) -> None:
    # Children of one parent go into one cluster, placed where the parent's first child appears in the table.
    parents = list(dict.fromkeys(s.parent for s in table.states if s.parent is not None))
    for state in table.states:
        if state.parent is None:
            _add_state(graph, state, table, marks)
    for parent in parents:
        with graph.subgraph(name=f"cluster_{parent}") as cluster:
            cluster.attr(label=parent, style="rounded", color="gray55", fontname=FONT, fontsize="12", margin="14")
            for state in table.states:
                if state.parent == parent:
                    _add_state(cluster, state, table, marks)


def _add_state(graph: graphviz.Digraph, state: StateSpec, table: MachineTable, marks: _Overlay | None) -> None:
    attrs = {"fillcolor": FILL[state.status]}
    if state.resting:
        attrs["peripheries"] = "2"
    if state.name == table.initial:
        attrs["penwidth"] = "1.6"
    if marks is not None and state.name == marks.last_state:
        attrs.update(fillcolor="gold", penwidth="3", color="darkorange3")
    raised = marks.raised.get(state.name) if marks is not None else None
    if raised is not None:
        attrs.update(color=INTERRUPT_COLOR, penwidth="3")
    graph.node(state.name, label=_state_label(state, raised), **attrs)


def _state_label(state: StateSpec, raised: str | None) -> str:
    parts = [str(state.status)]
    if state.fn is not None:
        parts.append(f"fn={state.fn}")
    if state.stage is not None:
        parts.append(f"stage={state.stage}")
    lines = [f"<b>{_esc(state.leaf)}</b>", _small(" · ".join(parts))]
    if raised is not None:
        lines.append(f'<font point-size="9" color="{INTERRUPT_COLOR}"><b>{_esc(raised)}</b></font>')
    return "<" + "<br/>".join(lines) + ">"


# ---- edges ------------------------------------------------------------------------------------------------


def _add_edges(graph: graphviz.Digraph, table: MachineTable, marks: _Overlay | None) -> None:
    """One edge per group of same-label transitions; a group with several sources leaves from a hub point.

    Groups with the same sources share the hub (fit/validate/test/predict from every resting state), so each
    long label is drawn once and the re-entry edges are not repeated per trigger.
    """
    groups = _edge_groups(table)
    hubs: dict[tuple[str, ...], str] = {}
    for group in groups:
        sources = tuple(t.source for t in group)
        if len(sources) > 1 and sources not in hubs:
            hubs[sources] = f"__hub{len(hubs) + 1}__"
            leaving = [g for g in groups if tuple(t.source for t in g) == sources]
            _add_hub(graph, table, hubs[sources], leaving, marks)
        first = group[0]
        hits = sum(marks.hits[t.key] for t in group) if marks is not None else None
        start = hubs.get(sources, first.source)
        label = _edge_label(first, hits)
        # In an overlay, hit counts restyle the edge: its own colour stays only where it was hit.
        attrs = {**_edge_style(table, first), **_hit_style(hits)}
        graph.edge(start, first.dest, label=label, **attrs)


def _edge_groups(table: MachineTable) -> list[list[TransitionSpec]]:
    """Transitions that differ only in their source, in table order: they share one label."""
    groups: dict[tuple, list[TransitionSpec]] = {}
    for t in table.transitions:
        groups.setdefault((t.trigger, t.dest, t.guard, t.before, t.after), []).append(t)
    return list(groups.values())


def _add_hub(
    graph: graphviz.Digraph,
    table: MachineTable,
    hub: str,
    leaving: list[list[TransitionSpec]],
    marks: _Overlay | None,
) -> None:
    styles = [_edge_style(table, group[0]) for group in leaving]
    style = styles[0] if all(s == styles[0] for s in styles) else {}
    sources = [t.source for t in leaving[0]]
    color = style.get("color", "gray35")
    graph.node(hub, label="", shape="point", width="0.09", color=color, comment=f"from {', '.join(sources)}")
    for source in sources:
        hits = sum(marks.hits[t.key] for g in leaving for t in g if t.source == source) if marks else None
        attrs = {**style, **_hit_style(hits), "arrowhead": "none"}
        if hits:
            attrs["label"] = f"<{_hit_label(hits)}>"
        if table.by_name[source].resting and source != table.initial:
            # Runs end in these states, below the hub. Declared downwards (drawn backwards, arrowless), the
            # edge agrees with the ranks and is routed cleanly instead of looping around the whole graph.
            graph.edge(hub, source, dir="back", arrowtail="none", **attrs)
        else:
            graph.edge(source, hub, **attrs)


def _edge_style(table: MachineTable, t: TransitionSpec) -> dict[str, str]:
    if _interrupts(table, t.dest):
        return {"style": "dashed", "color": INTERRUPT_COLOR, "fontcolor": INTERRUPT_COLOR}
    return {}


def _hit_style(hits: int | None) -> dict[str, str]:
    if hits is None:
        return {}
    if hits == 0:
        return {"color": UNHIT_COLOR, "fontcolor": "gray50"}
    return {"penwidth": f"{min(1.5 + hits * 0.5, 4.0):g}"}


def _edge_label(t: TransitionSpec, hits: int | None) -> str:
    head = f"<b>{_esc(t.trigger)}</b>"
    if t.guard is not None:
        head += f" [{_esc(t.guard)}]"
    if hits:
        head += " " + _hit_label(hits)
    callbacks = _wrap(t.callbacks)
    return f"<{head}<br/>{_small(*callbacks)}>" if callbacks else f"<{head}>"


def _hit_label(hits: int) -> str:
    return f'<font color="{HIT_COLOR}"><b>×{hits}</b></font>'


def _wrap(callbacks: Sequence[str]) -> list[str]:
    """`/ a, b,` lines of at most CALLBACK_WRAP characters (a longer name gets a line of its own)."""
    lines: list[str] = []
    for name in callbacks:
        if lines and len(lines[-1]) + len(name) + 2 <= CALLBACK_WRAP:
            lines[-1] += f" {name},"
        else:
            lines.append(f"{name},")
    if lines:
        lines[0] = "/ " + lines[0]
        lines[-1] = lines[-1].removesuffix(",")
    return lines


def _small(*lines: str) -> str:
    return f'<font point-size="8" color="gray30">{"<br/>".join(_esc(line) for line in lines)}</font>'


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


# ---- files ------------------------------------------------------------------------------------------------


def render(directory: str | os.PathLike[str] = "diagrams") -> list[str]:
    """Write trainer.dot, trainer.svg and trainer.png into `directory`; returns the paths written.

    Raises GraphvizMissingError (after writing the DOT) when Graphviz's `dot` program is not installed.
    """
    graph = build_graph()
    base = Path(directory) / BASENAME
    return write_graph(graph, [base.with_suffix(f".{fmt}") for fmt in FORMATS])


def write_graph(graph: graphviz.Digraph, paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Write `graph` once per path, the format taken from each extension (.dot, .svg or .png)."""
    formats = [_format_of(path) for path in paths]
    written: list[str] = []
    # DOT first: it needs no Graphviz install, and is what the freshness check compares.
    for path, fmt in sorted(zip(paths, formats), key=lambda pair: pair[1] != "dot"):
        try:
            data = graph.source.encode("utf-8") if fmt == "dot" else graph.pipe(format=fmt)
        except graphviz.ExecutableNotFound:
            raise GraphvizMissingError(written) from None
        write_atomic(os.fspath(path), data)
        written.append(os.fspath(path))
    return written


def _format_of(path: str | os.PathLike[str]) -> str:
    fmt = Path(path).suffix.removeprefix(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"cannot tell the diagram format of {os.fspath(path)!r}: name it .dot, .svg or .png")
    return fmt


def check(directory: str | os.PathLike[str] = REPO_DIAGRAMS) -> str | None:
    """None when `directory`/trainer.dot equals a fresh render, else what is wrong with it."""
    path = Path(directory) / f"{BASENAME}.dot"
    if not path.is_file():
        return f"{path} is missing; generate it with: {REGENERATE}"
    if path.read_text(encoding="utf-8") != build_graph().source:
        return f"{path} is out of date with statemachine/table.py; regenerate it with: {REGENERATE}"
    return None


# ---- command line -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m statemachine.diagram",
        description="Render the trainer's state machine (DOT, SVG, PNG), check the committed DOT, "
        "or overlay a history dump.",
    )
    parser.add_argument(
        "-o",
        "--output",
        help=f"output directory (default {REPO_DIAGRAMS}); with --history the output file (.svg/.png/.dot)",
    )
    parser.add_argument("--check", action="store_true", help="fail when the committed trainer.dot is stale")
    parser.add_argument("--history", metavar="DUMP", help="overlay this history dump (file or fsspec URL)")
    args = parser.parse_args(argv)
    if args.check and args.history:
        parser.error("--check and --history cannot be combined")
    if args.history is not None:
        return _render_overlay(parser, args.history, args.output)
    directory = args.output or REPO_DIAGRAMS
    if args.check:
        return _check(directory)
    return _render(directory)


def _check(directory: str | os.PathLike[str]) -> int:
    problem = check(directory)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    print(f"{Path(directory) / BASENAME}.dot is up to date")
    return 0


def _render(directory: str | os.PathLike[str]) -> int:
    try:
        written = render(directory)
    except GraphvizMissingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(written))
    return 0


def _render_overlay(parser: argparse.ArgumentParser, dump_path: str, output: str | None) -> int:
    if output is None:
        parser.error("--history needs -o FILE (.svg, .png or .dot)")
    try:
        _format_of(output)
        dump = load_history(dump_path)
    except (FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    try:
        written = write_graph(build_graph(overlay=dump), [output])
    except GraphvizMissingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
