"""The interrupt path always completes: every `on_exception` runs, hooks that raise (even SystemExit or
KeyboardInterrupt) never cut teardown or the history dump short, Ctrl-C pressed many times in a row leaves a
trainer that accepts its next call, and the automatic dump shows the completed `interrupt` edge."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Boom, TinyModel, make_loader, quiet_trainer

import statemachine as L
from statemachine.engine.history import check_path, load_history

SCRIPTS = Path(__file__).resolve().parent / "scripts"


class Raises(L.Callback):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        raise self.error


class Records(L.Callback):
    def __init__(self) -> None:
        self.seen: list[BaseException] = []

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.seen.append(exception)


def test_a_raising_on_exception_does_not_skip_the_others_nor_replace_the_error(tmp_path: Any) -> None:
    after = Records()
    trainer = quiet_trainer(tmp_path, callbacks=[Raises(ValueError("hook broke")), after])
    with pytest.raises(Boom) as caught:
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert after.seen == [caught.value]
    assert "Raises.on_exception also raised ValueError: hook broke" in caught.value.__notes__
    assert trainer.interrupted and Path(trainer.history_dump_path).exists()


@pytest.mark.parametrize("exit_error", [SystemExit(3), KeyboardInterrupt()], ids=["SystemExit", "KeyboardInterrupt"])
def test_an_exit_from_on_exception_lets_the_edge_finish_then_wins(tmp_path: Any, exit_error: BaseException) -> None:
    after = Records()
    logger = L.CSVLogger(tmp_path)
    trainer = quiet_trainer(tmp_path, logger=logger, log_every_n_steps=1, callbacks=[Raises(exit_error), after])
    sigterm_before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(type(exit_error)) as caught:
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert caught.value is exit_error and isinstance(caught.value.__cause__, Boom)
    assert len(after.seen) == 1  # the next callback still ran
    last = trainer.history[-1]
    assert (last.trigger, last.dest) == ("interrupt", "interrupted")
    assert [c.name for c in last.callbacks][-2:] == ["teardown_internals", "dump_history"]
    assert signal.getsignal(signal.SIGTERM) is sigterm_before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert load_history(trainer.history_dump_path).records[-1].dest == "interrupted"
    trainer.fit(TinyModel(), make_loader())  # the trainer takes its next call
    assert trainer.state.finished


def test_the_automatic_dump_ends_with_the_completed_interrupt_edge(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="validation_step"), make_loader(), make_loader())
    dump = load_history(trainer.history_dump_path)
    last = dump.records[-1]
    assert (last.trigger, last.source, last.dest) == ("interrupt", "fitting.sanity_checking", "interrupted")
    assert [c.name for c in last.callbacks][-1] == "dump_history"
    assert check_path(dump.records) == []
    assert dump.records == trainer.history


def test_ctrl_c_pressed_many_times_at_once_still_shuts_down_and_the_trainer_runs_again(tmp_path: Any) -> None:
    child = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "ctrl_c_flood.py"), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "READY"
        deadline = time.perf_counter() + 0.01  # presses about 50 us apart for 10 ms
        while time.perf_counter() < deadline:
            os.kill(child.pid, signal.SIGINT)
            spin = time.perf_counter() + 50e-6
            while time.perf_counter() < spin:
                pass
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["SystemExit(1) from KeyboardInterrupt", "STATE interrupted LAST interrupt->interrupted"], err
    assert "Detected KeyboardInterrupt, attempting graceful shutdown ..." in err
    assert lines[2] == "AGAIN finished 2"


def test_a_failing_dump_is_noted_and_never_replaces_the_error(tmp_path: Any) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the log directory would be")
    trainer = quiet_trainer(blocked)  # the dump goes under default_root_dir, which is a file
    with pytest.raises(Boom) as caught:
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert any(note.startswith("the state history could not be dumped") for note in caught.value.__notes__)
    assert trainer.interrupted and trainer.history[-1].dest == "interrupted"
