"""pytest plugin: print the transition coverage at the end of a session, optionally fail under a threshold.

    pytest --transition-coverage
    pytest --transition-coverage-fail-under=100

The report covers the built-in table and every extended table a trainer ran in the session; the threshold
applies to the built-in table's transitions.

Registered as the `pytest11` entry point `transition_coverage`, so it loads in every pytest session of
everyone who installs the package: it imports the table (and with it torch) only when an option is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from _pytest.terminal import TerminalReporter

_PERCENT = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("transition-coverage", "state-machine transition coverage")
    group.addoption(
        "--transition-coverage",
        action="store_true",
        default=False,
        help="print which declared state-machine transitions fired, and the guard outcomes",
    )
    group.addoption(
        "--transition-coverage-fail-under",
        type=float,
        default=None,
        metavar="PCT",
        help="fail the session when transition coverage is below PCT percent (implies --transition-coverage)",
    )


def pytest_configure(config: pytest.Config) -> None:
    threshold = config.getoption("transition_coverage_fail_under")
    if threshold is not None and not 0 <= threshold <= 100:
        raise pytest.UsageError(
            f"--transition-coverage-fail-under must be a percentage from 0 to 100, got {threshold:g}"
        )


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("transition_coverage")) or _threshold(config) is not None


def _threshold(config: pytest.Config) -> float | None:
    return config.getoption("transition_coverage_fail_under")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _enabled(config):
        return
    from statemachine.engine.coverage import COVERAGE

    percent = COVERAGE.percent()
    config.stash[_PERCENT] = percent
    threshold = _threshold(config)
    # Only turn a passing session into a failing one; a session that already failed keeps its own status.
    if threshold is not None and percent < threshold and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from statemachine.engine.coverage import COVERAGE

    terminalreporter.write_sep("-", "state-machine transition coverage")
    terminalreporter.write_line("\n\n".join(COVERAGE.report(table) for table in COVERAGE.tables))
    threshold = _threshold(config)
    if threshold is None:
        return
    percent = config.stash.get(_PERCENT, COVERAGE.percent())
    option = f"--transition-coverage-fail-under={threshold:g}%"
    if percent < threshold:
        line = f"FAIL: transition coverage {percent:.1f}% is below {option}"
        terminalreporter.write_line(line, red=True, bold=True)
    else:
        terminalreporter.write_line(f"transition coverage {percent:.1f}% meets {option}", green=True)
