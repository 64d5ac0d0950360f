"""Render the machine's table as Graphviz diagrams, optionally overlaid with a run's history.

    python -m statemachine.engine.diagram                      # diagrams/trainer*.{dot,svg,png}
    python -m statemachine.engine.diagram --check              # are the committed DOT files fresh?
    python -m statemachine.engine.diagram --measure            # each SVG's width and smallest font at README width
    python -m statemachine.engine.diagram --history run.json -o run.svg

Two kinds of diagram, so each stays legible at a README's column width: the overview (`trainer`) shows the
whole table with every long callback chain folded into a named group, and one diagram per trainer function
(`trainer-fit`, `trainer-validate`, ...) shows that function's states with the chains spelled out.
The DOT text is a pure function of the table (no timestamps, table order throughout), so the committed DOT
files can be compared byte for byte with a fresh render.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import graphviz

from statemachine.engine.enums import TrainerFn, TrainerStatus
from statemachine.engine.history import HistoryDump, load_history, load_table, warn_on_table_mismatch, write_atomic
from statemachine.engine.table import TABLE, MachineTable, StateSpec, TransitionSpec
from statemachine.engine.trace import build_trace

REPO_DIAGRAMS = Path(__file__).resolve().parents[2] / "diagrams"
BASENAME = "trainer"
FORMATS = ("dot", "svg", "png")
REGENERATE = "python -m statemachine.engine.diagram"
INSTALL_DOT = "SVG/PNG need Graphviz's `dot` program (e.g. apt-get install graphviz)"
README_COLUMN_PX = 800  # the width a README column gives an embedded image

FONT = "Helvetica"
INTERRUPT_COLOR = "firebrick"
HIT_COLOR = "royalblue"
UNHIT_COLOR = "gray70"
DETAIL_SIZE = "10"  # point size of state details, chain names and callbacks: the smallest text drawn
CALLBACK_WRAP = 30  # characters per callback line on an edge label
GUARD_WRAP = 26  # characters of trigger and guard beyond which a guard over callbacks gets a line of its own
FOLD_OVER = 2  # the overview spells out chains of at most this many callbacks and names the longer ones
# A long chain is named after the first of these callbacks it runs (checked in this order); a chain with none
# of them is named after its trigger.
CHAIN_MARKERS = (
    ("call_on_exception_hooks", "interrupt chain"),
    ("call_on_fit_start", "fit setup chain"),
    ("connect_model", "setup chain"),
    ("call_on_fit_end", "fit teardown chain"),
    ("call_teardown_hooks", "teardown chain"),
)
EXTENSION_MAX = 2  # a chain this many callbacks longer than a named one is named as that one plus its extras
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


@dataclass(frozen=True)
class View:
    """One diagram: the whole table with folded chains (`fn` None), or one trainer function in full detail."""

    fn: TrainerFn | None = None

    @property
    def name(self) -> str:
        return BASENAME if self.fn is None else f"{BASENAME}-{self.fn.value}"


def views(table: MachineTable = TABLE) -> list[View]:
    """The overview, then one view per trainer function in the order the table first names it."""
    fns = dict.fromkeys(state.fn for state in table.states if state.fn is not None)
    return [View(), *(View(fn) for fn in fns)]


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


def chain_names(table: MachineTable = TABLE) -> dict[tuple[str, ...], str]:
    """A name for every callback chain longer than FOLD_OVER, keyed by the chain, in table order.

    Edges with the same callbacks share one name (CHAIN_MARKERS, else "<trigger> chain"). When two different
    chains would get the same name, the longer one is named as the shorter plus what it adds at either end
    ("end_training + fit teardown chain"); failing that, the later one in the table is numbered.
    """
    first_trigger: dict[tuple[str, ...], str] = {}
    for t in table.transitions:
        if len(t.callbacks) > FOLD_OVER:
            first_trigger.setdefault(t.callbacks, t.trigger)
    names: dict[tuple[str, ...], str] = {}
    for chain, trigger in first_trigger.items():
        base = next((name for marker, name in CHAIN_MARKERS if marker in chain), f"{trigger} chain")
        holder = next((other for other, name in names.items() if name == base), None)
        if holder is None:
            names[chain] = base
        elif (longer := _extension_name(chain, holder, base)) is not None:
            names[chain] = longer
        elif (longer := _extension_name(holder, chain, base)) is not None:
            names[holder], names[chain] = longer, base
        else:
            taken = set(names.values())
            names[chain] = next(f"{base} {n}" for n in range(2, len(names) + 3) if f"{base} {n}" not in taken)
    return names


def _extension_name(longer: tuple[str, ...], shorter: tuple[str, ...], name: str) -> str | None:
    """`longer` named as `shorter` plus at most EXTENSION_MAX callbacks before or after it, or None."""
    extra = len(longer) - len(shorter)
    if not 0 < extra <= EXTENSION_MAX:
        return None
    if longer[extra:] == shorter:
        return " + ".join((*longer[:extra], name))
    if longer[: len(shorter)] == shorter:
        return " + ".join((name, *longer[len(shorter) :]))
    return None


# ---- graph ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scope:
    """The part of the table one diagram draws: its states, its transitions and the node drawing each state."""

    table: MachineTable
    states: tuple[StateSpec, ...]
    transitions: tuple[TransitionSpec, ...]
    node: dict[str, str]  # state -> the node drawing it (twins share their first twin's node)
    folded: dict[tuple[str, ...], str]  # chain -> name, for chains drawn as their name only
    named: dict[tuple[str, ...], str]  # chain -> name, for every named chain

    @classmethod
    def of(cls, table: MachineTable, view: View) -> _Scope:
        named = chain_names(table)
        if view.fn is None:
            return cls(table, table.states, table.transitions, _twins(table), named, named)
        own = {state.name for state in table.states if state.fn == view.fn}
        transitions = tuple(t for t in table.transitions if t.source in own or t.dest in own)
        shown = own | {t.source for t in transitions} | {t.dest for t in transitions}
        states = tuple(state for state in table.states if state.name in shown)
        return cls(table, states, transitions, {state.name: state.name for state in states}, {}, named)

    def members(self, node: str) -> list[StateSpec]:
        return [state for state in self.states if self.node[state.name] == node]

    def children(self, parent: str) -> list[str]:
        return [state.name for state in self.states if state.parent == parent]


def _twins(table: MachineTable) -> dict[str, str]:
    """Each state's node in the overview: top-level running states entered from the same states with the same
    guards and callbacks, and left the same ways, are one node (validating, testing and predicting)."""
    node = {state.name: state.name for state in table.states}
    first: dict[tuple, str] = {}
    for state in table.states:
        if state.parent is not None or state.resting:
            continue
        entries = frozenset((t.source, t.guard, t.before, t.after) for t in table.transitions if t.dest == state.name)
        exits = frozenset(
            (t.trigger, t.dest, t.guard, t.before, t.after, t.best_effort)
            for t in table.transitions
            if t.source == state.name
        )
        node[state.name] = first.setdefault((state.status, entries, exits), state.name)
    return node


def build_graph(
    table: MachineTable = TABLE, overlay: HistoryDump | None = None, view: View = View()
) -> graphviz.Digraph:
    """One view of the table as a Digraph; with `overlay`, the dump's hit counts, last state and failing states."""
    if overlay is not None:
        warn_on_table_mismatch(overlay, table)
    marks = _Overlay.from_dump(overlay, table) if overlay is not None else None
    scope = _Scope.of(table, view)
    graph = graphviz.Digraph(view.name, graph_attr=_graph_attrs(scope, view, marks))
    graph.attr("node", fontname=FONT, fontsize="12", shape="box", style="rounded,filled", margin="0.12,0.05")
    graph.attr("edge", fontname=FONT, fontsize="11", color="gray35", arrowsize="0.7")
    _add_initial(graph, scope)
    _add_states(graph, scope, marks)
    _add_edges(graph, scope, marks)
    return graph


# A guard reduced across ranks: its mark on the edge, and what the legend says of it.
_COLLECTIVE = {"any": ("∃", "any rank decides for all ranks"), "all": ("∀", "all ranks must agree")}


def _graph_attrs(scope: _Scope, view: View, marks: _Overlay | None) -> dict[str, str]:
    table = scope.table
    what = "trainer state machine" if view.fn is None else f"trainer.{view.fn.value}()"
    title = f"{what}  (table {table.digest})"
    used = [
        f"{mark}: {meaning}"
        for kind, (mark, meaning) in _COLLECTIVE.items()
        if any(guard.collective == kind for guard in table.guards)
    ]
    if used:
        title += "\nguard " + "; ".join(used)
    # A drawn guard that requires another is asked only in an epoch where that one holds (GuardSpec.requires).
    drawn = {t.guard_name for t in scope.transitions}
    requiring: dict[str, list[str]] = {}
    for guard in table.guards:
        if guard.requires is not None and guard.name in drawn:
            requiring.setdefault(guard.requires, []).append(guard.name)
    for required, names in requiring.items():
        title += f"\nasked only while {required} holds:\n" + "\n".join(textwrap.wrap(", ".join(names), 60))
    if marks is not None:
        title += f"\nrun overlay: edge hit counts, last state {marks.last_state or '-'}"
    return {
        "compound": "true",
        "rankdir": "TB",
        "nodesep": "0.2",
        "ranksep": "0.45",
        "fontname": FONT,
        "fontsize": "13",
        "labelloc": "t",
        "label": title,
    }


def _add_initial(graph: graphviz.Digraph, scope: _Scope) -> None:
    if scope.table.initial in scope.node:
        graph.node("__initial__", label="", shape="circle", style="filled", fillcolor="black", width="0.16")
        graph.edge("__initial__", scope.node[scope.table.initial], arrowsize="0.6")


def _add_states(graph: graphviz.Digraph, scope: _Scope, marks: _Overlay | None) -> None:
    # Children of one parent go into one cluster, placed where the parent's first child appears in the table.
    parents = list(dict.fromkeys(s.parent for s in scope.states if s.parent is not None))
    for state in scope.states:
        if state.parent is None and scope.node[state.name] == state.name:
            _add_state(graph, scope.members(state.name), scope.table, marks)
    for parent in parents:
        with graph.subgraph(name=f"cluster_{parent}") as cluster:
            cluster.attr(label=parent, style="rounded", color="gray55", fontname=FONT, fontsize="12", margin="6")
            for state in scope.states:
                if state.parent == parent:
                    _add_state(cluster, [state], scope.table, marks)


def _add_state(graph: graphviz.Digraph, members: list[StateSpec], table: MachineTable, marks: _Overlay | None) -> None:
    state = members[0]
    attrs = {"fillcolor": FILL[state.status]}
    if state.resting:
        attrs["peripheries"] = "2"
    if state.name == table.initial:
        attrs["penwidth"] = "1.6"
    names = {member.name for member in members}
    if marks is not None and marks.last_state in names:
        attrs.update(fillcolor="gold", penwidth="3", color="darkorange3")
    raised = [(m.leaf, marks.raised[m.name]) for m in members if m.name in marks.raised] if marks is not None else []
    if raised:
        attrs.update(color=INTERRUPT_COLOR, penwidth="3")
    label = "<br/>".join(_state_lines(member) for member in members)
    for leaf, what in raised:
        text = what if len(members) == 1 else f"{leaf}: {what}"
        label += f'<br/><font point-size="{DETAIL_SIZE}" color="{INTERRUPT_COLOR}"><b>{_esc(text)}</b></font>'
    graph.node(state.name, label=f"<{label}>", **attrs)


def _state_lines(state: StateSpec) -> str:
    # The status is what the fill colour shows; fn and stage are what `trainer.state` reports in this state.
    parts = [f"fn={state.fn}" if state.fn is not None else str(state.status)]
    if state.stage is not None:
        parts.append(f"stage={state.stage}")
    return f"<b>{_esc(state.leaf)}</b><br/>{_small(*parts)}"


# ---- edges ------------------------------------------------------------------------------------------------


def _add_edges(graph: graphviz.Digraph, scope: _Scope, marks: _Overlay | None) -> None:
    """One edge per pair of ends, its label one line per group of same-label transitions; an edge with
    several sources leaves from a hub point.

    Edges with the same sources share the hub (fit/validate/test/predict from every resting state), so each
    label is drawn once and the re-entry edges are not repeated per trigger. Sources that make up a whole
    cluster (every fitting state can be interrupted) are drawn as one edge from the cluster's border.
    """
    bundles: dict[tuple[tuple[str, ...], str], list[list[TransitionSpec]]] = {}
    for group in _edge_groups(scope):
        bundles.setdefault((_sources(scope, group), scope.node[group[0].dest]), []).append(group)
    hubs: dict[tuple[str, ...], str] = {}
    for (sources, dest), bundle in bundles.items():
        tails = _tails(scope, sources)
        if len(tails) > 1 and sources not in hubs:
            hubs[sources] = f"__hub{len(hubs) + 1}__"
            leaving = [group for (other, _), groups in bundles.items() if other == sources for group in groups]
            _add_hub(graph, scope, hubs[sources], tails, leaving, marks)
        hits = [sum(marks.hits[t.key] for t in group) for group in bundle] if marks is not None else None
        # In an overlay, hit counts restyle the edge: its own colour stays only where it was hit.
        attrs = {**_edge_style(scope.table, bundle[0][0]), **_hit_style(None if hits is None else sum(hits))}
        if len(tails) > 1:
            start = hubs[sources]
        else:
            start, cluster = tails[0]
            if cluster is not None:
                attrs["ltail"] = f"cluster_{cluster}"
        lines = [_edge_label(group, scope, hits[i] if hits else None) for i, group in enumerate(bundle)]
        graph.edge(start, dest, label="<" + "<br/>".join(lines) + ">", **attrs)


def _edge_groups(scope: _Scope) -> list[list[TransitionSpec]]:
    """Transitions drawn as one edge, in table order: they differ only in their source, or in their trigger
    where they lead into one node of twins (validate, test and predict share one edge)."""
    groups: dict[tuple, list[TransitionSpec]] = {}
    for t in scope.transitions:
        dest = scope.node[t.dest]
        trigger = None if len(scope.members(dest)) > 1 else t.trigger
        groups.setdefault((trigger, dest, t.guard, t.before, t.after), []).append(t)
    return list(groups.values())


def _sources(scope: _Scope, group: list[TransitionSpec]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(scope.node[t.source] for t in group))


def _tails(scope: _Scope, sources: Sequence[str]) -> list[tuple[str, str | None]]:
    """Where a group's edges start: (node, None), or (last child, cluster) for a cluster whose every child in
    the diagram is a source."""
    tails: list[tuple[str, str | None]] = []
    for source in sources:
        parent = scope.table.by_name[source].parent
        children = scope.children(parent) if parent is not None else []
        if len(children) > 1 and set(children) <= set(sources):
            if (children[-1], parent) not in tails:
                tails.append((children[-1], parent))
        else:
            tails.append((source, None))
    return tails


def _add_hub(
    graph: graphviz.Digraph,
    scope: _Scope,
    hub: str,
    tails: list[tuple[str, str | None]],
    leaving: list[list[TransitionSpec]],
    marks: _Overlay | None,
) -> None:
    styles = [_edge_style(scope.table, group[0]) for group in leaving]
    style = styles[0] if all(s == styles[0] for s in styles) else {}
    color = style.get("color", "gray35")
    graph.node(
        hub,
        label="",
        shape="point",
        width="0.09",
        color=color,
        comment=f"from {', '.join(_sources(scope, leaving[0]))}",
    )
    for tail, cluster in tails:
        members = set(scope.children(cluster)) if cluster is not None else {s.name for s in scope.members(tail)}
        hits = sum(marks.hits[t.key] for g in leaving for t in g if t.source in members) if marks else None
        attrs = {**style, **_hit_style(hits), "arrowhead": "none"}
        if hits:
            attrs["label"] = f"<{_hit_label(hits)}>"
        if cluster is not None:
            graph.edge(tail, hub, ltail=f"cluster_{cluster}", **attrs)
        elif scope.table.by_name[tail].resting and tail != scope.table.initial:
            # Runs end in these states, below the hub. Declared downwards (drawn backwards, arrowless), the
            # edge agrees with the ranks and is routed cleanly instead of looping around the whole graph.
            graph.edge(hub, tail, dir="back", arrowtail="none", **attrs)
        else:
            graph.edge(tail, hub, **attrs)


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


def _edge_label(group: list[TransitionSpec], scope: _Scope, hits: int | None) -> str:
    t = group[0]
    # Twins' triggers stack, one per line, so the shared entry's label stays narrow.
    head = " |<br/>".join(f"<b>{_esc(trigger)}</b>" for trigger in dict.fromkeys(t.trigger for t in group))
    if t.guard is not None:
        # A long guard over a callback list takes a line of its own: the label stays as narrow as its callbacks.
        sep = "<br/>" if t.callbacks and len(t.trigger) + len(t.guard) > GUARD_WRAP else " "
        head += f"{sep}[{_esc(t.guard)}{_collective_mark(scope.table, t)}]"
    if hits:
        head += " " + _hit_label(hits)
    chain = t.callbacks
    if not chain:
        return head
    name = scope.named.get(chain)
    if chain in scope.folded:
        return f"{head}<br/>{_small(f'/ {name} ({len(chain)})', italic=True)}"
    lines = _wrap(chain)
    if name is not None:
        return f"{head}<br/>{_small(f'{name}:', italic=True)}<br/>{_small(*lines)}"
    return f"{head}<br/>{_small(*lines)}"


def _collective_mark(table: MachineTable, t: TransitionSpec) -> str:
    """A guard reduced across ranks says so: `∃` when any rank decides, `∀` when all ranks must."""
    spec = table.guard_specs.get(t.guard_name or "")
    if spec is None or spec.collective is None:
        return ""
    return " " + _COLLECTIVE[spec.collective][0]


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


def _small(*lines: str, italic: bool = False) -> str:
    text = "<br/>".join(_esc(line) for line in lines)
    if italic:
        text = f"<i>{text}</i>"
    return f'<font point-size="{DETAIL_SIZE}" color="gray30">{text}</font>'


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


# ---- legibility -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Legibility:
    """How an SVG reads when a page shows it at most `column_px` wide (browsers shrink it, never enlarge it)."""

    width_pt: float
    smallest_font_pt: float
    column_px: int

    @property
    def scale(self) -> float:
        return min(1.0, self.column_px / (self.width_pt * 4 / 3))  # 1 pt is 4/3 CSS px

    @property
    def smallest_font_px(self) -> float:
        return self.smallest_font_pt * 4 / 3 * self.scale


def measure_svg(svg: str, column_px: int = README_COLUMN_PX) -> Legibility:
    """The width and smallest font size of a Graphviz SVG, and what they become in a `column_px` column."""
    width = re.search(r'<svg width="([\d.]+)pt"', svg)
    sizes = [float(size) for size in re.findall(r'font-size="([\d.]+)"', svg)]
    if width is None or not sizes:
        raise ValueError("not a Graphviz SVG with text: no width in pt or no font-size found")
    return Legibility(float(width.group(1)), min(sizes), column_px)


# ---- files ------------------------------------------------------------------------------------------------


def render(directory: str | os.PathLike[str] = "diagrams", table: MachineTable = TABLE) -> list[str]:
    """Write every view as .dot, .svg and .png into `directory`; returns the paths written.

    Raises GraphvizMissingError (after writing the DOT files) when Graphviz's `dot` program is not installed.
    """
    graphs = [(Path(directory) / view.name, build_graph(table, view=view)) for view in views(table)]
    written: list[str] = []
    # Every DOT first: they need no Graphviz install, and are what the freshness check compares.
    for base, graph in graphs:
        written += write_graph(graph, [base.with_suffix(".dot")])
    for base, graph in graphs:
        try:
            written += write_graph(graph, [base.with_suffix(f".{fmt}") for fmt in FORMATS if fmt != "dot"])
        except GraphvizMissingError:
            raise GraphvizMissingError(written) from None
    return written


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


def flow_artifacts(dump: HistoryDump, table: MachineTable = TABLE) -> dict[str, bytes]:
    """A run's flow as files: the history dump, its timeline (a Chrome trace) and the diagram of the path it took
    (SVG, or DOT where Graphviz is not installed, as the file names say)."""
    graph = build_graph(table, overlay=dump)
    try:
        diagram = {"state-overlay.svg": graph.pipe(format="svg")}
    except graphviz.ExecutableNotFound:
        diagram = {"state-overlay.dot": graph.source.encode("utf-8")}
    timeline = json.dumps(build_trace({"state-history.json": dump.records}), separators=(",", ":"))
    return {
        "state-history.json": dump.model_dump_json(indent=1).encode(),
        "state-timeline.trace.json": timeline.encode(),
        **diagram,
    }


def _format_of(path: str | os.PathLike[str]) -> str:
    fmt = Path(path).suffix.removeprefix(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"cannot tell the diagram format of {os.fspath(path)!r}: name it .dot, .svg or .png")
    return fmt


def check(directory: str | os.PathLike[str] = REPO_DIAGRAMS, table: MachineTable = TABLE) -> list[str]:
    """What is wrong with the DOT files in `directory` against a fresh render of every view (empty: nothing)."""
    problems: list[str] = []
    expected = {f"{view.name}.dot" for view in views(table)}
    for view in views(table):
        path = Path(directory) / f"{view.name}.dot"
        if not path.is_file():
            problems.append(f"{path} is missing; generate it with: {REGENERATE}")
        elif path.read_text(encoding="utf-8") != build_graph(table, view=view).source:
            problems.append(f"{path} is out of date with the table; regenerate it with: {REGENERATE}")
    for path in sorted(Path(directory).glob(f"{BASENAME}*.dot")):
        if path.name not in expected:
            problems.append(f"{path} shows no view of the table; remove it (and its .svg/.png)")
    return problems


# ---- command line -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m statemachine.engine.diagram",
        description="Render the trainer's state machine (DOT, SVG, PNG: an overview and one diagram per "
        "trainer function), check the committed DOT files, measure the SVGs, or overlay a history dump.",
    )
    parser.add_argument(
        "-o",
        "--output",
        help=f"output directory (default {REPO_DIAGRAMS}); with --history the output file (.svg/.png/.dot)",
    )
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--check", action="store_true", help="fail when a committed DOT file is stale")
    modes.add_argument(
        "--measure", action="store_true", help=f"print each SVG's width and smallest font at {README_COLUMN_PX} px"
    )
    modes.add_argument("--history", metavar="DUMP", help="overlay this history dump (file or fsspec URL)")
    parser.add_argument(
        "--table", metavar="MODULE:ATTR", help="a table made with TABLE.extend (default: the built-in one); needs -o"
    )
    args = parser.parse_args(argv)
    table = TABLE
    if args.table is not None:
        if args.output is None:
            parser.error(f"--table needs -o: {REPO_DIAGRAMS} holds the built-in table's diagrams")
        try:
            table = load_table(args.table)
        except (ImportError, AttributeError, ValueError) as err:
            parser.error(str(err))
    if args.history is not None:
        return _render_overlay(parser, args.history, args.output, table)
    directory = args.output or REPO_DIAGRAMS
    if args.check:
        return _check(directory, table)
    if args.measure:
        return _measure(directory)
    return _render(directory, table)


def _check(directory: str | os.PathLike[str], table: MachineTable) -> int:
    problems = check(directory, table)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    names = ", ".join(f"{view.name}.dot" for view in views())
    print(f"{directory}: {names} are up to date")
    return 0


def _measure(directory: str | os.PathLike[str]) -> int:
    missing = 0
    for view in views():
        path = Path(directory) / f"{view.name}.svg"
        if not path.is_file():
            print(f"{path} is missing; generate it with: {REGENERATE}", file=sys.stderr)
            missing += 1
            continue
        m = measure_svg(path.read_text(encoding="utf-8"))
        print(
            f"{path.name}: {m.width_pt:g} pt wide, smallest font {m.smallest_font_pt:g} pt"
            f" -> {m.smallest_font_px:.1f} px in a {m.column_px} px column"
        )
    return 1 if missing else 0


def _render(directory: str | os.PathLike[str], table: MachineTable) -> int:
    try:
        written = render(directory, table)
    except GraphvizMissingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(written))
    return 0


def _render_overlay(parser: argparse.ArgumentParser, dump_path: str, output: str | None, table: MachineTable) -> int:
    if output is None:
        parser.error("--history needs -o FILE (.svg, .png or .dot)")
    try:
        _format_of(output)
        dump = load_history(dump_path)
    except (FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    try:
        written = write_graph(build_graph(table, overlay=dump), [output])
    except GraphvizMissingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
