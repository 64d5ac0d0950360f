"""The diagram: deterministic DOT, the freshness check, the history overlay, and missing Graphviz."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine.engine.diagram import REPO_DIAGRAMS, View, build_graph, chain_names, main, measure_svg, render, views
from statemachine.engine.enums import TrainerFn
from statemachine.engine.history import CallbackRecord, ExceptionRecord, History
from statemachine.engine.table import TABLE, TransitionSpec

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
        ("val_check", "fitting.training", "fitting.validating", "val_batches_counted"),
        ("validation_done", "fitting.validating", "fitting.training", None),
        ("val_check", "fitting.training", "fitting.validating", "val_batches_counted"),
        ("interrupt", "fitting.validating", "interrupted", None),
    ]
    for trigger, source, dest, guard in steps:
        record = history.open(trigger, source, epoch=0, global_step=1, batch_idx=0, rank=0)
        edge = f"{trigger}: {source} -> {dest}"
        record.transition, record.dest = edge if guard is None else f"{edge} [{guard}]", dest
        record.callbacks = [CallbackRecord(name="connect_model", duration_s=0.001)]
    record.exception = ExceptionRecord(type="ZeroDivisionError", message="division by zero", traceback="")
    return history


FIT, VALIDATE, TEST, PREDICT = (View(fn) for fn in TrainerFn)


def drawn(source: str, start: str, end: str) -> bool:
    """`reaches`, where an edge leaving a cluster's border (ltail) leaves from every state in that cluster."""
    if reaches(source, start, end):
        return True
    for _, head, attrs in edges(source):
        cluster = re.search(r"ltail=cluster_([\w.]+)", attrs)
        if cluster is not None and start.startswith(cluster.group(1) + "."):
            if head == end or reaches(source, head, end):
                return True
    return False


def node_line(source: str, name: str) -> str:
    match = re.search(rf'^\t+"?{re.escape(name)}"? \[(label=<.*)\]$', source, re.MULTILINE)
    assert match is not None, f"no node {name}"
    return match.group(1)


# ---- the graph --------------------------------------------------------------------------------------------


def test_views_are_the_overview_and_one_per_trainer_function() -> None:
    assert [view.name for view in views()] == [
        "trainer",
        "trainer-fit",
        "trainer-validate",
        "trainer-test",
        "trainer-predict",
    ]


@pytest.mark.parametrize("view", views(), ids=lambda v: v.name)
def test_dot_is_deterministic(view: View) -> None:
    assert build_graph(view=view).source == build_graph(view=view).source


def test_every_declared_transition_is_drawn_in_its_functions_diagram() -> None:
    sources = {view.fn: build_graph(view=view).source for view in views()[1:]}
    missing = []
    for t in TABLE.transitions:
        fns = {TABLE.by_name[t.source].fn, TABLE.by_name[t.dest].fn} - {None}
        missing += [f"{t.key} in {fn}" for fn in fns if not drawn(sources[fn], t.source, t.dest)]
    assert missing == []


def test_function_diagrams_hold_only_that_functions_states_and_the_resting_ones() -> None:
    test = build_graph(view=TEST).source
    assert {name for name, _ in re.findall(r'^\t+"?([\w.]+)"? \[(label=<)', test, re.MULTILINE)} == {
        "idle",
        "testing",
        "finished",
        "interrupted",
    }
    fit = build_graph(view=FIT).source
    assert "testing" not in fit and "<b>validate</b>" not in fit


def test_overview_draws_validate_test_and_predict_as_one_node_and_one_entry() -> None:
    # The three evaluation functions are entered, left and interrupted the same way: one node shows them.
    source = build_graph().source
    twins = node_line(source, "validating")
    assert "<b>testing</b>" in twins and "<b>predicting</b>" in twins and "fn=predict" in twins
    assert not re.search(r"^\t+(testing|predicting) ", source, re.MULTILINE)
    entry = next(a for t, h, a in edges(source) if h == "validating")
    assert "<b>validate</b> |<br/><b>test</b> |<br/><b>predict</b>" in entry
    assert ("validating", "finished") in {(t, h) for t, h, _ in edges(source)}


def test_overview_keeps_every_trigger() -> None:
    source = build_graph().source
    assert [trigger for trigger in TABLE.triggers if f"<b>{trigger}</b>" not in source] == []


def test_fitting_is_a_cluster_holding_its_seven_children() -> None:
    for view in (View(), FIT):
        source = build_graph(view=view).source
        assert "compound=true" in source
        start = source.index("subgraph cluster_fitting {")
        cluster = source[start : source.index("}", start)]
        assert "label=fitting" in cluster
        children = re.findall(r'^\t\t"(fitting\.\w+)" \[', cluster, re.MULTILINE)
        assert children == [
            "fitting.setup",
            "fitting.sanity_checking",
            "fitting.train_setup",
            "fitting.val_setup",
            "fitting.between_epochs",
            "fitting.training",
            "fitting.validating",
        ]


def test_states_show_leaf_names_and_resting_states_are_double_bordered() -> None:
    source = build_graph().source
    node = {name: line for name, line in re.findall(r'^\t+"?([\w.]+)"? \[(label=<.*)$', source, re.MULTILINE)}
    assert "<b>training</b>" in node["fitting.training"] and "fn=fit<br/>stage=train" in node["fitting.training"]
    resting = {s.name for s in TABLE.states if s.resting}
    assert {name for name, line in node.items() if "peripheries=2" in line} == resting
    assert ("__initial__", TABLE.initial, "arrowsize=0.6") in edges(source)


def test_overview_folds_long_callback_chains_into_named_groups() -> None:
    source = build_graph().source
    assert "connect_model" not in source and "call_on_exception_hooks" not in source
    fit = next(t for t in TABLE.transitions if t.trigger == "fit")
    assert f"<i>/ fit setup chain ({len(fit.callbacks)})</i>" in source
    assert source.count("/ setup chain (") == 1  # validate, test and predict run one chain
    assert "/ interrupt chain (" in source and "/ teardown chain (" in source
    # The two ways a fit ends share their teardown; the one after training ran adds end_training.
    ended = {t.trigger: len(t.callbacks) for t in TABLE.transitions if t.guard == "fit_done" and t.dest == "finished"}
    train_ready_done = next(a for t, h, a in edges(source) if t == "fitting.train_setup" and h == "finished")
    assert "<b>train_ready</b> [fit_done ∃]<br/>" in train_ready_done
    assert f"<i>/ fit teardown chain ({ended['train_ready']})</i>" in train_ready_done
    assert f"/ end_training + fit teardown chain ({ended['epoch_boundary']})" in source
    # Short chains stay spelled out.
    assert "/ save_rng_state" in source and "/ reset_sanity_results,<br/>restore_rng_state" in source


def test_function_diagrams_spell_out_each_chain_once_under_its_name() -> None:
    for view in views()[1:]:
        source = build_graph(view=view).source
        entry = next(t for t in TABLE.transitions if t.trigger == view.fn.value)
        assert source.count("connect_model") == 1, view.name
        assert all(name in source for name in entry.callbacks), view.name
        assert source.count("<b>interrupt</b>") == 1 and "<i>interrupt chain:</i>" in source
    assert "<i>setup chain:</i>" in build_graph(view=TEST).source
    assert "<i>fit setup chain:</i>" in build_graph(view=FIT).source


def test_chain_names_are_shared_by_equal_chains_and_derived_for_new_triggers() -> None:
    names = chain_names()
    by_trigger = {t.trigger: names.get(t.callbacks) for t in TABLE.transitions}
    assert by_trigger["validate"] == by_trigger["test"] == by_trigger["predict"] == "setup chain"
    assert by_trigger["interrupt"] == "interrupt chain" and by_trigger["sanity_check_done"] is None
    # A chain without a known callback is named after its trigger; a different chain with a taken name is numbered.
    new_chain = ("save_rng_state", "restore_rng_state", "dump_history")
    other_teardown = ("dump_history", "teardown_internals", "call_teardown_hooks")
    extra = TransitionSpec(trigger="calibrate", source="finished", dest="finished", after=new_chain)
    other_finish = TransitionSpec(trigger="finish", source="testing", dest="finished", before=other_teardown)
    table = TABLE.model_copy(update={"transitions": (*TABLE.transitions, extra, other_finish)})
    names = chain_names(table)
    assert names[new_chain] == "calibrate chain"
    assert names[other_teardown] == "teardown chain 2"
    # A shorter chain with a taken name keeps the name; the longer one is renamed after it.
    finish = next(t.callbacks for t in TABLE.transitions if t.trigger == "finish")
    shorter = TransitionSpec(trigger="finish", source="predicting", dest="finished", before=finish[1:])
    names = chain_names(TABLE.model_copy(update={"transitions": (*TABLE.transitions, shorter)}))
    assert names[finish[1:]] == "teardown chain" and names[finish] == f"{finish[0]} + teardown chain"


def test_interrupt_edges_are_dashed_firebrick() -> None:
    for view in views()[1:]:
        source = build_graph(view=view).source
        interrupt = [t for t in TABLE.transitions if t.trigger == "interrupt" and TABLE.by_name[t.source].fn == view.fn]
        assert interrupt and all(drawn(source, t.source, t.dest) for t in interrupt), view.name
    source = build_graph().source
    # The overview interrupts the whole fitting cluster with one edge from its border, and the twins with one.
    into_hub = {tail: attrs for tail, head, attrs in edges(source) if head == "__hub2__"}
    assert set(into_hub) == {"fitting.validating", "validating"}
    assert "ltail=cluster_fitting" in into_hub["fitting.validating"]
    assert all("color=firebrick" in a and "style=dashed" in a for a in into_hub.values())


def test_labels_carry_trigger_guard_and_wrapped_callbacks() -> None:
    source = build_graph(view=FIT).source
    assert "<b>epoch_boundary</b> [not fit_done ∃]>" in source
    stop = next(attrs for tail, head, attrs in edges(source) if (tail, head) == ("fitting.between_epochs", "finished"))
    assert "<b>epoch_boundary</b> [fit_done ∃]" in stop
    assert "<i>end_training + fit teardown chain:</i>" in stop
    assert "/ end_training,<br/>say_why_fit_stopped,<br/>teardown_internals,<br/>call_on_fit_end," in stop


def test_edges_between_the_same_states_share_one_label() -> None:
    source = build_graph().source
    begin = [a for t, h, a in edges(source) if (t, h) == ("fitting.setup", "fitting.train_setup")]
    assert len(begin) == 1
    assert "<b>begin</b> [resumes_inside_epoch]<br/><b>begin</b> [not should_sanity_check]" in begin[0]


# ---- legibility -------------------------------------------------------------------------------------------


def test_measure_svg_scales_wide_diagrams_down_to_the_column() -> None:
    svg = '<svg width="1200pt" height="10pt"><text font-size="12.00">a</text><text font-size="8.00">b</text></svg>'
    wide = measure_svg(svg, column_px=800)
    assert (wide.width_pt, wide.smallest_font_pt) == (1200, 8)
    assert wide.smallest_font_px == pytest.approx(8 * 800 / 1200)  # 1600 px shown in 800
    narrow = measure_svg(svg.replace("1200pt", "300pt"), column_px=800)
    assert narrow.smallest_font_px == pytest.approx(8 * 4 / 3)  # never enlarged
    with pytest.raises(ValueError, match="no width in pt"):
        measure_svg("<svg/>")


@pytest.mark.parametrize("view", views(), ids=lambda v: v.name)
def test_committed_svgs_are_legible_in_a_readme_column(view: View) -> None:
    # Embedded at 800 px, the smallest text must stay at least 10.5 px (the old single diagram had 4.9 px).
    legibility = measure_svg((REPO_DIAGRAMS / f"{view.name}.svg").read_text(encoding="utf-8"))
    assert legibility.smallest_font_px >= 10.5, legibility


def test_overlay_shows_hit_counts_last_state_and_the_failing_state() -> None:
    plain = build_graph().source
    source = build_graph(overlay=crashed_run().to_dump()).source
    assert "×" not in plain
    val_check = next(a for t, h, a in edges(source) if (t, h) == ("fitting.training", "fitting.validating"))
    assert "<b>×2</b>" in val_check and "penwidth=2.5" in val_check
    fit = next(a for t, h, a in edges(source) if t == "__hub1__" and h == "fitting.setup")
    assert "<b>×1</b>" in fit
    unhit = next(a for t, h, a in edges(source) if (t, h) == ("fitting.between_epochs", "finished"))
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


def test_overlay_marks_the_twin_that_failed_inside_the_shared_node() -> None:
    history = History()
    for trigger, source, dest in [("test", "idle", "testing"), ("interrupt", "testing", "interrupted")]:
        record = history.open(trigger, source, epoch=0, global_step=0, batch_idx=0, rank=0)
        record.transition, record.dest = f"{trigger}: {source} -> {dest}", dest
    record.exception = ExceptionRecord(type="ValueError", message="bad batch", traceback="")
    source = build_graph(overlay=history.to_dump()).source
    twins = node_line(source, "validating")
    assert "testing: raised ValueError" in twins and "color=firebrick" in twins
    entry = next(a for t, h, a in edges(source) if h == "validating")
    assert "<b>×1</b>" in entry


def test_overlay_from_another_table_warns() -> None:
    dump = crashed_run().to_dump().model_copy(update={"table_digest": "0123456789abcdef"})
    with pytest.warns(UserWarning, match="0123456789abcdef"):
        build_graph(overlay=dump)


# ---- files and the command line ---------------------------------------------------------------------------


def test_check_passes_on_the_committed_dot_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith(f"{REPO_DIAGRAMS}: trainer.dot, trainer-fit.dot, ") and out.endswith(" are up to date\n")


def test_check_fails_on_an_edited_missing_or_orphaned_dot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for view in views():
        name = f"{view.name}.dot"
        (tmp_path / name).write_text((REPO_DIAGRAMS / name).read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["--check", "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    fit = tmp_path / "trainer-fit.dot"
    fit.write_text(fit.read_text(encoding="utf-8").replace("epoch_boundary", "epoch_over"), encoding="utf-8")
    (tmp_path / "trainer.dot").unlink()
    (tmp_path / "trainer-tune.dot").write_text("digraph {}", encoding="utf-8")
    assert main(["--check", "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{fit} is out of date" in err and "python -m statemachine.engine.diagram" in err
    assert f"{tmp_path / 'trainer.dot'} is missing" in err
    assert f"{tmp_path / 'trainer-tune.dot'} shows no view of the table" in err
    assert "trainer-test.dot" not in err


def test_check_runs_as_a_program_in_a_fresh_process() -> None:
    # A fresh interpreter (new hash seed) must produce the DOT that was committed from another one.
    command = [sys.executable, "-m", "statemachine.engine.diagram", "--check"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_render_writes_dot_svg_and_png_for_every_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = render(tmp_path / "out")
    names = [view.name for view in views()]
    expected = [f"{n}.dot" for n in names] + [f"{n}.{fmt}" for n in names for fmt in ("svg", "png")]
    assert written == [str(tmp_path / "out" / name) for name in expected]
    assert (tmp_path / "out" / "trainer-fit.dot").read_text(encoding="utf-8") == build_graph(view=FIT).source
    assert (tmp_path / "out" / "trainer.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert (tmp_path / "out" / "trainer-test.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["--measure", "-o", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"{n}.svg" for n in names]
    assert all(re.search(r"pt wide, smallest font [\d.]+ pt -> [\d.]+ px in a 800 px column$", x) for x in lines)


def test_measure_reports_missing_svgs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--measure", "-o", str(tmp_path)]) == 1
    assert f"{tmp_path / 'trainer.svg'} is missing" in capsys.readouterr().err


def test_without_dot_the_dot_files_are_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-binaries-here"))
    assert main(["-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "need Graphviz's `dot` program" in err and "apt-get install graphviz" in err
    for view in views():
        assert (tmp_path / f"{view.name}.dot").read_text(encoding="utf-8") == build_graph(view=view).source
    assert not list(tmp_path.glob("*.svg"))


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
        (["--check", "--history", "run.json"], "not allowed with argument"),
        (["--check", "--measure"], "not allowed with argument"),
    ],
)
def test_bad_usage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    dump = crashed_run().dump(tmp_path / "run.json")
    with pytest.raises(SystemExit) as info:
        main([arg.format(dump=dump) for arg in argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_guards_reduced_across_ranks_are_marked_with_a_legend() -> None:
    source = build_graph().source
    assert "[fit_done ∃]" in source
    # rank-independent guards, and the val_check ones (their rank-local inputs are agreed per batch), carry no mark
    assert "[should_sanity_check]" in source and "[validates_before_stop]" in source and "[val_time_elapsed]" in source
    assert "guard ∃: any rank decides for all ranks" in source


def test_the_title_lists_the_drawn_guards_that_require_another() -> None:
    legend = "asked only while epoch_validates holds:\nvalidates_at_epoch_end, validates_before_stop,\nval_time_elapsed"
    assert legend in build_graph(view=FIT).source
    assert "asked only while" not in build_graph(view=VALIDATE).source  # no val_check edge drawn there
