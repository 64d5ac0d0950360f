"""Saves under real faults: Ctrl-C and kill -9 during a write, a full disk, and the `last` file across a resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, TinyModel, make_loader, quiet_trainer

import statemachine as L
from devices.checkpoint_io import load_checkpoint

TEMPORARY = re.compile(r"\..+\.tmp-[0-9a-f]{32}")


def _child(code: str, *args: str, **options: Any) -> subprocess.Popen[str]:
    """A Python process running `code` against this checkout."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-c", textwrap.dedent(code), *args]
    return subprocess.Popen(command, env=env, cwd=REPO, text=True, **options)


def _temporaries(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if TEMPORARY.fullmatch(name))


# ---- Ctrl-C during a save ---------------------------------------------------------------------------------

_SAVE_UNTIL_INTERRUPTED = """
    import json, os, sys, torch
    from devices.checkpoint_io import load_checkpoint, save_checkpoint

    target, rounds = sys.argv[1], int(sys.argv[2])
    state = {f"layer{i}": torch.randn(1024, 1024) for i in range(16)}  # 64 MiB, so a save takes a while
    state["tag"] = "first"
    save_checkpoint(state, target)
    completed = "first"
    print("ready", flush=True)
    for round_ in range(rounds):
        try:
            while True:
                state["tag"] = f"{round_}-next"
                save_checkpoint(state, target)
                completed = state["tag"]
        except BaseException as error:
            report = {"type": type(error).__name__, "message": str(error)[:300], "completed": completed}
            report["attempted"] = state["tag"]
            report["loaded"] = load_checkpoint(target)["tag"]
            report["files"] = sorted(os.listdir(os.path.dirname(target)))
            print(json.dumps(report), flush=True)
"""


def _write_in_progress(directory: Path, size: int) -> bool:
    for name in _temporaries(directory):
        try:
            if (directory / name).stat().st_size > size:
                return True
        except FileNotFoundError:
            pass
    return False


def test_ctrl_c_while_torch_writes_raises_keyboard_interrupt_and_keeps_the_previous_file(tmp_path: Path) -> None:
    rounds = 6
    target = tmp_path / "model.ckpt"
    child = _child(_SAVE_UNTIL_INTERRUPTED, str(target), str(rounds), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        reports = []
        for _ in range(rounds):
            # Interrupt once a quarter of the file is on disk: torch is inside its record writes.
            while not _write_in_progress(tmp_path, 16 << 20):
                assert child.poll() is None, child.communicate()[1]
                os.sched_yield()
            child.send_signal(signal.SIGINT)
            reports.append(json.loads(child.stdout.readline()))
        _, errors = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, errors  # no abort ("write to closed file") after an interrupted save
    for report in reports:
        assert report["type"] == "KeyboardInterrupt", report
        # The file holds the last save that finished (or, if the signal came after the rename, the new one).
        assert report["loaded"] in (report["completed"], report["attempted"])
        assert report["files"] == ["model.ckpt"]  # the interrupted save's temporary file is gone


# ---- kill -9 during a save --------------------------------------------------------------------------------

_SAVE_AND_WAIT_INSIDE = """
    import sys, torch
    from devices.checkpoint_io import save_checkpoint

    class WaitInside:
        # Pickled while torch.save has the temporary file open: report it, then wait for the kill.
        def __reduce__(self):
            print("inside", flush=True)
            sys.stdin.readline()
            return (WaitInside, ())

    save_checkpoint({"weights": torch.randn(1000), "wait": WaitInside()}, sys.argv[1])
"""


def test_a_run_removes_the_temporary_file_a_killed_save_left(tmp_path: Path) -> None:
    directory = tmp_path / "ckpts"
    directory.mkdir()
    for user_file in (".notes.tmp-keep", "plain.tmp-0123456789abcdef0123456789abcdef"):
        (directory / user_file).write_text("not ours")
    child = _child(_SAVE_AND_WAIT_INSIDE, str(directory / "last.ckpt"), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "inside\n"
        left = _temporaries(directory)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGKILL
    assert len(left) == 1 and left[0].startswith(".last.ckpt.tmp-")
    assert _temporaries(directory) == left  # kill -9 leaves it behind

    checkpoint = L.ModelCheckpoint(dirpath=directory, save_last=True)
    trainer = quiet_trainer(tmp_path, enable_checkpointing=True, callbacks=[checkpoint], limit_train_batches=2)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        trainer.fit(TinyModel(), make_loader())
    assert _temporaries(directory) == []
    assert sorted(os.listdir(directory)) == sorted(
        [".notes.tmp-keep", "plain.tmp-0123456789abcdef0123456789abcdef", "epoch=0-step=2.ckpt", "last.ckpt"]
    )


# ---- a full disk ------------------------------------------------------------------------------------------

_FILL_THE_DISK = """
    import json, os, sys, torch
    from devices.checkpoint_io import load_checkpoint, save_checkpoint

    target = os.path.join(sys.argv[1], "model.ckpt")
    save_checkpoint({"tag": "small", "weights": torch.zeros(1000)}, target)
    report = {}
    try:
        save_checkpoint({"tag": "large", "weights": torch.zeros(1 << 20)}, target)  # 4 MiB on a 1 MiB disk
    except BaseException as error:
        report = {"type": type(error).__name__, "errno": getattr(error, "errno", None), "message": str(error)}
    report["loaded"] = load_checkpoint(target)["tag"]
    report["files"] = sorted(os.listdir(sys.argv[1]))
    # The failed save gave its space back: a small one fits again.
    save_checkpoint({"tag": "again", "weights": torch.zeros(1000)}, target)
    report["after"] = load_checkpoint(target)["tag"]
    print(json.dumps(report), flush=True)
"""


def _on_a_small_tmpfs(directory: Path, code: str) -> list[str]:
    """Run `code` with `directory` as a fresh 1 MiB tmpfs, mounted in a private mount namespace (as root, or as
    the root of a new user namespace), so the mount vanishes with the process."""
    namespaces = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    script = 'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"'
    return ["unshare", *namespaces, "sh", "-c", script, str(directory), sys.executable, "-c", textwrap.dedent(code)]


def test_a_full_disk_says_so_names_the_file_and_keeps_the_previous_one(tmp_path: Path) -> None:
    directory = tmp_path / "small-disk"
    directory.mkdir()
    command = [*_on_a_small_tmpfs(directory, _FILL_THE_DISK), str(directory)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["type"] == "OSError" and report["errno"] == 28
    assert "No space left on device" in report["message"]
    assert str(directory / "model.ckpt") in report["message"]
    assert report["loaded"] == "small" and report["files"] == ["model.ckpt"]
    assert report["after"] == "again"


# ---- the `last` file across interrupts and resumes ------------------------------------------------------


class TerminatedAt(TinyModel):
    """Sends itself SIGTERM in one training batch, the way a cluster preempts a job."""

    def __init__(self, step: int | None = None):
        super().__init__()
        self.terminate_at = step

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_step == self.terminate_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)


def _checkpointing_trainer(tmp_path: Path, directory: Path) -> L.Trainer:
    checkpoint = L.ModelCheckpoint(dirpath=directory, save_last=True, save_on_exception=True)
    return quiet_trainer(tmp_path, enable_checkpointing=True, callbacks=[checkpoint], max_epochs=3)


def test_a_run_resumed_from_an_exception_checkpoint_keeps_writing_last_ckpt(tmp_path: Path) -> None:
    directory = tmp_path / "ckpts"
    with pytest.raises(L.SIGTERMException):
        _checkpointing_trainer(tmp_path, directory).fit(TerminatedAt(step=1), make_loader())
    exception_file = directory / "epoch=0-step=2.ckpt"  # the on-exception save, under the filename template
    assert load_checkpoint(str(exception_file))["global_step"] == 2
    assert load_checkpoint(str(directory / "last.ckpt"))["global_step"] == 2

    resumed = _checkpointing_trainer(tmp_path, directory)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        resumed.fit(TerminatedAt(), make_loader(), ckpt_path=exception_file)
    assert resumed.global_step == 12
    assert not list(directory.glob("last-v*.ckpt"))
    assert load_checkpoint(str(directory / "last.ckpt"))["global_step"] == 12


_INTERRUPT_THE_LAST_WRITE = """
    import glob, json, os, signal, sys
    sys.path.insert(0, "tests")
    from conftest import TinyModel, make_loader, quiet_trainer
    import statemachine as L
    from devices.checkpoint_io import load_checkpoint

    directory = sys.argv[1]

    class CtrlCInFourthSave(TinyModel):
        saves = 0

        def on_save_checkpoint(self, checkpoint):
            # Saves 1 and 2: epoch 0's top-k file and last.ckpt; 3 and 4 the same for epoch 1.
            CtrlCInFourthSave.saves += 1
            if CtrlCInFourthSave.saves == 4:
                os.kill(os.getpid(), signal.SIGINT)

    checkpoint = L.ModelCheckpoint(dirpath=directory, save_last=True, save_on_exception=True)
    trainer = quiet_trainer(directory, enable_checkpointing=True, callbacks=[checkpoint], max_epochs=2,
                            limit_train_batches=2)
    try:
        trainer.fit(CtrlCInFourthSave(), make_loader())
        raised = None
    except BaseException as error:
        raised = f"{type(error).__name__} from {type(error.__cause__).__name__}"
    steps = {os.path.basename(p): load_checkpoint(p)["global_step"] for p in glob.glob(directory + "/*.ckpt")}
    print(json.dumps({"raised": raised, "step": trainer.global_step, "files": steps}))
"""


def test_ctrl_c_during_the_epoch_end_last_write_still_saves_the_state_on_exception(tmp_path: Path) -> None:
    child = _child(_INTERRUPT_THE_LAST_WRITE, str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output, errors = child.communicate(timeout=120)
    assert child.returncode == 0, errors
    report = json.loads(output.splitlines()[-1])
    assert report["raised"] == "SystemExit from KeyboardInterrupt" and report["step"] == 4
    files = report["files"]
    assert files["last.ckpt"] == 4  # not left at epoch 0's step 2
    assert files["epoch=1-step=4.ckpt"] == 4  # the on-exception save, under the filename template
