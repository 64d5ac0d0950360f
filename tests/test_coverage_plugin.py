"""Transition coverage: the collector, its report, and the pytest plugin's report and threshold."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import statemachine.engine.coverage
from statemachine.engine.coverage import COVERAGE, TransitionCoverage
from statemachine.engine.table import TABLE

pytest_plugins = ["pytester"]

DECLARED = [t.key for t in TABLE.transitions]
FIT = "fit: idle -> fitting.setup"
BEGIN = "begin: fitting.setup -> fitting.sanity_checking [should_sanity_check]"
GUARDS = [
    "resumes_inside_epoch",
    "resumes_mid_epoch",
    "should_sanity_check",
    "needs_val_loaders",
    "fit_done",
    "epoch_validates",
    "validates_at_epoch_end",
    "validates_before_stop",
    "val_time_elapsed",
    "val_batches_counted",
]


def test_percent_counts_declared_transitions_that_fired() -> None:
    coverage = TransitionCoverage()
    assert coverage.percent() == 0.0
    coverage.record_transition(FIT)
    coverage.record_transition(FIT)
    coverage.record_transition(BEGIN)
    coverage.record_transition("teleport: idle -> finished")  # not declared: does not count
    assert coverage.hits(FIT) == 2 and coverage.hits(BEGIN) == 1 and coverage.hits(DECLARED[-1]) == 0
    assert coverage.percent() == pytest.approx(2 / len(DECLARED) * 100)
    for key in DECLARED:
        coverage.record_transition(key)
    assert coverage.percent() == 100.0
    coverage.reset()
    assert coverage.percent() == 0.0 and coverage.hits(FIT) == 0


def test_guard_counts() -> None:
    coverage = TransitionCoverage()
    for value in (True, False, False):
        coverage.guard_tally("fit_done")[value] += 1  # as a machine counts
    assert coverage.guard_counts("fit_done") == (1, 2)
    assert coverage.guard_counts("val_time_elapsed") == (0, 0)


def test_report_lists_every_transition_and_guard_in_order() -> None:
    coverage = TransitionCoverage()
    coverage.record_transition(FIT)
    coverage.guard_tally("should_sanity_check")[False] += 1
    lines = coverage.report().splitlines()
    assert lines[0] == f"table 'trainer' ({TABLE.digest})"
    assert lines[1] == "transitions (hits):"
    assert [line.split("  ")[1].strip() for line in lines[2 : 2 + len(DECLARED)]] == DECLARED
    fit_line = lines[2 + DECLARED.index(FIT)]
    assert fit_line.split()[-1] == "1" and "never fired" not in fit_line
    assert lines[2 + DECLARED.index(BEGIN)].endswith("0  <- never fired")
    guard_lines = lines[3 + len(DECLARED) : -2]
    assert lines[2 + len(DECLARED)] == "guards (true/false):"
    assert [line.split()[0] for line in guard_lines] == GUARDS
    sanity = guard_lines[GUARDS.index("should_sanity_check")]
    assert sanity.split()[1:5] == ["T", "0", "F", "1"] and sanity.endswith("<- never True")
    assert guard_lines[GUARDS.index("fit_done")].endswith("<- never True nor False")
    percent = 100 / len(DECLARED)
    assert lines[-2] == f"transition coverage: 1/{len(DECLARED)} ({percent:.1f}%)"
    assert lines[-1] == f"guard branch coverage: {100 / (2 * len(GUARDS)):.1f}%"


def test_export_and_merge_add_up_across_processes() -> None:
    worker = TransitionCoverage()
    worker.record_transition(FIT)
    worker.guard_tally("fit_done")[True] += 1
    exported = json.loads(json.dumps(worker.export()))
    assert exported == {"transitions": {FIT: 1}, "guards": {"fit_done": [1, 0]}}
    main = TransitionCoverage()
    main.record_transition(FIT)
    main.merge_counts(**exported)
    main.merge_counts(transitions={BEGIN: 3}, guards={"fit_done": (0, 2)})
    assert (main.hits(FIT), main.hits(BEGIN), main.guard_counts("fit_done")) == (2, 3, (1, 2))


@pytest.mark.parametrize(
    ("transitions", "guards", "message"),
    [
        ({FIT: -1}, {}, "transition 'fit: idle -> fitting.setup' count must be a non-negative int, got -1"),
        ({FIT: 1.5}, {}, "count must be a non-negative int, got 1.5"),
        ({}, {"fit_done": [1]}, r"guard 'fit_done' counts must be a \(true, false\) pair, got \[1\]"),
        ({}, {"fit_done": "TF"}, "must be a .true, false. pair, got 'TF'"),
        ({}, {"fit_done": [1, None]}, "guard 'fit_done' false count must be a non-negative int, got None"),
    ],
)
def test_merge_refuses_bad_counts(transitions: dict, guards: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TransitionCoverage().merge_counts(transitions, guards)


def test_coverage_is_one_process_wide_collector() -> None:
    from statemachine.engine import coverage

    assert isinstance(COVERAGE, TransitionCoverage) and coverage.COVERAGE is COVERAGE


# ---- the pytest plugin ------------------------------------------------------------------------------------

INNER_TEST = f"""
from statemachine.engine.coverage import COVERAGE

def test_runs_a_little():
    COVERAGE.record_transition({FIT!r})
    COVERAGE.record_transition({BEGIN!r})
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.Pytester]:
    """A pytester dir with a test that fires two transitions; the outer session's counts are kept aside."""
    # Installed packages load the plugin through its entry point; the inner runs load it explicitly with -p.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_inner=INNER_TEST)
    saved = COVERAGE.export()
    COVERAGE.reset()
    try:
        yield pytester
    finally:
        COVERAGE.reset()
        COVERAGE.merge_counts(**saved)


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "statemachine.pytest_plugin", "-p", "no:cacheprovider", *args)


def test_plugin_fails_the_session_under_the_threshold(inner: pytest.Pytester) -> None:
    result = run_inner(inner, "--transition-coverage-fail-under=50")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    percent = 200 / len(DECLARED)
    result.stdout.fnmatch_lines(
        [
            "*state-machine transition coverage*",
            f"transition coverage: 2/{len(DECLARED)} ({percent:.1f}%)",
            f"FAIL: transition coverage {percent:.1f}% is below --transition-coverage-fail-under=50%",
        ]
    )


def test_plugin_passes_at_a_zero_threshold(inner: pytest.Pytester) -> None:
    result = run_inner(inner, "--transition-coverage-fail-under=0")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*meets --transition-coverage-fail-under=0%"])


def test_plugin_report_only(inner: pytest.Pytester) -> None:
    result = run_inner(inner, "--transition-coverage")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"  {FIT}*1", "guards (true/false):", "transition coverage: 2/*"])
    assert "fail-under" not in result.stdout.str()


def test_plugin_is_silent_without_its_options(inner: pytest.Pytester) -> None:
    result = run_inner(inner)
    assert result.ret == pytest.ExitCode.OK
    assert "transition coverage" not in result.stdout.str()


def test_plugin_refuses_a_threshold_outside_0_to_100(inner: pytest.Pytester) -> None:
    result = run_inner(inner, "--transition-coverage-fail-under=150")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--transition-coverage-fail-under must be a percentage from 0 to 100, got 150*"])


def test_the_plugin_module_imports_neither_the_table_nor_torch() -> None:
    # Every pytest session of every user who installs the package loads the plugin, so it must stay light.
    # Loaded from its file, so that this checks the plugin's own imports, not the package's __init__.
    plugin = Path(statemachine.engine.coverage.__file__).parents[1] / "pytest_plugin.py"
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('transition_coverage', {str(plugin)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(sorted({'statemachine', 'statemachine.engine.table', 'torch'} & set(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
