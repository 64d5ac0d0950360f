"""The diagram: deterministic DOT, the freshness check, the history overlay, and missing Graphviz."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine.diagram import REPO_DIAGRAMS, build_graph, main, render
from statemachine.history import CallbackRecord, ExceptionRecord, History
from statemachine.table import TABLE

EDGE = re.compile(r'^\t+("[^"]+"|\S+) -> ("[^"]+"|\S+)(?: \[(.*)\])?$', re.MULTILINE)


def edges(source: str) -> list[tuple[str, str, str]]:
    return [(tail.strip('"'), head.strip('"'), attrs or "") for tail, head, attrs in EDGE.findall(source)]


def reaches(source: str, start: str, end: str) -> bool:
    """Whether the DOT has start -> end directly or through one hub point (drawn either way round)."""
    pairs = {(tail, head) if "dir=back" not in attrs else (head, tail) for tail, head, attrs in edges(source)}
    hubs = {node for pair in pairs for node in pair if node.startswith("__hub")}
    return (start, end) in pairs or any((start, hub) in pairs and (hub, end) in pairs for hub in hubs)


def crashed_run() -> History:
    """idle -fit-> setup -> train_setup -> training -val_check-> validating, then validation raises."""
    history = History()
    steps = [
        ("fit", "idle", "fitting.setup", None),
        ("begin", "fitting.setup", "fitting.train_setup", "not should_sanity_check"),
        ("train_ready", "fitting.train_setup", "fitting.training", "not fit_done"),
        ("epoch_boundary", "fitting.training", "fitting.training", "not fit_done"),
        ("val_check", "fitting.training", "fitting.validating", "should_check_val"),
        ("validation_done", "fitting.validating", "fitting.training", None),
        ("val_check", "fitting.training", "fitting.validating", "should_check_val"),
        ("interrupt", "fitting.validating", "interrupted", None),
    ]
    for trigger, source, dest, guard in steps:
        record = history.open(trigger, source, epoch=0, global_step=1, batch_idx=0, rank=0)
        edge = f"{trigger}: {source} -> {dest}"
        record.transition, record.dest = edge if guard is None else f"{edge} [{guard}]", dest
        record.callbacks = [CallbackRecord(name="connect_model", duration_s=0.001)]
    record.exception = ExceptionRecord(type="ZeroDivisionError", message="division by zero", traceback="")
    return history


# ---- the graph --------------------------------------------------------------------------------------------


def test_dot_is_deterministic() -> None:
    assert build_graph().source == build_graph().source


def test_every_declared_transition_is_drawn() -> None:
    source = build_graph().source
    missing = [t.key for t in TABLE.transitions if not reaches(source, t.source, t.dest)]
    assert missing == []


def test_fitting_is_a_cluster_holding_its_five_children() -> None:
    source = build_graph().source
    assert "compound=true" in source
    cluster = source[source.index("subgraph cluster_fitting {") : source.index("}", source.index("cluster_fitting"))]
    assert "label=fitting" in cluster
    children = re.findall(r'^\t\t"(fitting\.\w+)" \[', cluster, re.MULTILINE)
    assert children == [
        "fitting.setup",
        "fitting.sanity_checking",
        "fitting.train_setup",
        "fitting.training",
        "fitting.validating",
    ]


def test_states_show_leaf_names_and_resting_states_are_double_bordered() -> None:
    source = build_graph().source
    node = {name: line for name, line in re.findall(r'^\t+"?([\w.]+)"? \[(label=<.*)$', source, re.MULTILINE)}
    assert "<b>training</b>" in node["fitting.training"] and "fn=fit · stage=train" in node["fitting.training"]
    resting = {s.name for s in TABLE.states if s.resting}
    assert {name for name, line in node.items() if "peripheries=2" in line} == resting
    assert ("__initial__", TABLE.initial, "arrowsize=0.6") in edges(source)


def test_shared_long_labels_are_drawn_once() -> None:
    source = build_graph().source
    # fit/validate/test/predict leave one hub for all three resting states: one label each, not three.
    assert source.count("connect_model") == 4
    assert source.count("call_on_exception_hooks") == 1
    assert source.count("<b>interrupt</b>") == 1


def test_interrupt_edges_are_dashed_firebrick() -> None:
    source = build_graph().source
    interrupt_sources = {t.source for t in TABLE.transitions if t.trigger == "interrupt"}
    drawn = [(tail, attrs) for tail, _, attrs in edges(source) if tail in interrupt_sources and "__hub" in _]
    dashed = {tail for tail, attrs in drawn if "color=firebrick" in attrs and "style=dashed" in attrs}
    assert dashed == interrupt_sources


def test_labels_carry_trigger_guard_and_wrapped_callbacks() -> None:
    source = build_graph().source
    assert "<b>epoch_boundary</b> [not fit_done]>" in source
    stop = next(attrs for tail, head, attrs in edges(source) if (tail, head) == ("fitting.training", "finished"))
    assert "<b>epoch_boundary</b> [fit_done]" in stop
    assert "/ end_training, teardown_internals,<br/>call_on_fit_end, call_teardown_hooks," in stop


def test_overlay_shows_hit_counts_last_state_and_the_failing_state() -> None:
    plain = build_graph().source
    source = build_graph(overlay=crashed_run().to_dump()).source
    assert "×" not in plain
    val_check = next(a for t, h, a in edges(source) if (t, h) == ("fitting.training", "fitting.validating"))
    assert "<b>×2</b>" in val_check and "penwidth=2.5" in val_check
    fit = next(a for t, h, a in edges(source) if t == "__hub1__" and h == "fitting.setup")
    assert "<b>×1</b>" in fit
    unhit = next(a for t, h, a in edges(source) if (t, h) == ("fitting.training", "finished"))
    assert "×" not in unhit and "color=gray70" in unhit
    interrupted = re.search(r"^\tinterrupted \[(.*)\]$", source, re.MULTILINE).group(1)
    assert "fillcolor=gold" in interrupted
    assert "last state interrupted" in source
    failing = re.search(r'^\t\t"fitting.validating" \[(.*)\]$', source, re.MULTILINE).group(1)
    assert "raised ZeroDivisionError" in failing and "color=firebrick" in failing


def test_overlay_marks_where_a_run_was_interrupted_without_a_recorded_exception() -> None:
    history = crashed_run()
    history.records[-1].exception = None  # the driver keeps the exception itself; the record only moves
    source = build_graph(overlay=history.to_dump()).source
    failing = re.search(r'^\t\t"fitting.validating" \[(.*)\]$', source, re.MULTILINE).group(1)
    assert "interrupted here" in failing and "color=firebrick" in failing


def test_overlay_of_a_run_without_interrupts_greys_the_interrupt_edges() -> None:
    history = crashed_run()
    for record in history.records[-1:]:
        record.transition, record.dest, record.exception = None, None, None  # the interrupt never happened
    source = build_graph(overlay=history.to_dump()).source
    interrupt = next(a for t, h, a in edges(source) if h == "interrupted" and "<b>interrupt</b>" in a)
    assert "color=gray70" in interrupt and "style=dashed" in interrupt and "×" not in interrupt
    assert "raised" not in source and "interrupted here" not in source


def test_overlay_from_another_table_warns() -> None:
    dump = crashed_run().to_dump().model_copy(update={"table_digest": "0123456789abcdef"})
    with pytest.warns(UserWarning, match="0123456789abcdef"):
        build_graph(overlay=dump)


# ---- files and the command line ---------------------------------------------------------------------------


def test_check_passes_on_the_committed_dot(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out == f"{REPO_DIAGRAMS / 'trainer.dot'} is up to date\n"


def test_check_fails_on_an_edited_or_missing_dot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "trainer.dot"
    committed = (REPO_DIAGRAMS / "trainer.dot").read_text(encoding="utf-8")
    copy.write_text(committed.replace("epoch_boundary", "epoch_over"), encoding="utf-8")
    assert main(["--check", "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{copy} is out of date" in err and "python -m statemachine.diagram" in err
    copy.unlink()
    assert main(["--check", "-o", str(tmp_path)]) == 1
    assert f"{copy} is missing" in capsys.readouterr().err


def test_check_runs_as_a_program_in_a_fresh_process() -> None:
    # A fresh interpreter (new hash seed) must produce the DOT that was committed from another one.
    command = [sys.executable, "-m", "statemachine.diagram", "--check"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_render_writes_dot_svg_and_png(tmp_path: Path) -> None:
    written = render(tmp_path / "out")
    assert written == [str(tmp_path / "out" / f"trainer.{fmt}") for fmt in ("dot", "svg", "png")]
    assert (tmp_path / "out" / "trainer.dot").read_text(encoding="utf-8") == build_graph().source
    assert (tmp_path / "out" / "trainer.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert (tmp_path / "out" / "trainer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_dot_the_dot_file_is_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-binaries-here"))
    assert main(["-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "need Graphviz's `dot` program" in err and "apt-get install graphviz" in err
    assert (tmp_path / "trainer.dot").read_text(encoding="utf-8") == build_graph().source
    assert not (tmp_path / "trainer.svg").exists()


def test_history_overlay_from_the_command_line(tmp_path: Path) -> None:
    dump = crashed_run().dump(tmp_path / "run.json")
    out = tmp_path / "overlay.dot"
    assert main(["--history", dump, "-o", str(out)]) == 0
    assert "<b>×2</b>" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--history", "run.json"], "--history needs -o FILE"),
        (["--history", "{dump}", "-o", "overlay.pdf"], "name it .dot, .svg or .png"),
        (["--history", "missing.json", "-o", "x.svg"], "missing.json' does not exist"),
        (["--check", "--history", "run.json"], "cannot be combined"),
    ],
)
def test_bad_usage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    dump = crashed_run().dump(tmp_path / "run.json")
    with pytest.raises(SystemExit) as info:
        main([arg.format(dump=dump) for arg in argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
