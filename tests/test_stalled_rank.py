"""A rank that stops arriving is named, never a silent hang: two real processes on gloo, one of which blocks
forever in its training step; the strategy's timeout is 5 seconds (tests/scripts/stall_app.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statemachine.engine.history import load_history

APP = Path(__file__).parent / "scripts" / "stall_app.py"
HARD_TIMEOUT = 120  # seconds; a hang fails the test instead of the suite
TIMEOUT_SECONDS = 5  # the strategy's timeout in the app
ENDS_WITHIN = TIMEOUT_SECONDS + 25  # seconds from the stall until every process has ended


def _running(pid: int) -> bool:
    """Whether `pid` still runs (an exited child not yet reaped, a zombie, runs nothing)."""
    status = Path(f"/proc/{pid}/status")
    try:
        return "\nState:\tZ" not in status.read_text()
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("strategy", "stalls"),
    [("ddp", 1), ("fsdp", 1), ("ddp", 0)],
    ids=["ddp-rank1-stalls", "fsdp-rank1-stalls", "ddp-launching-rank0-stalls"],
)
def test_a_stalled_rank_is_named_shows_its_stack_and_every_process_ends(
    tmp_path: Path, strategy: str, stalls: int
) -> None:
    result = subprocess.run(
        [sys.executable, str(APP), str(tmp_path), strategy, str(stalls)],
        capture_output=True,
        text=True,
        timeout=HARD_TIMEOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    ended = time.time()
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert ended - float((tmp_path / "stalled_at").read_text()) < ENDS_WITHIN
    assert not [pid for pid in (int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)) if _running(pid)]

    # The surviving rank's error names the stalled one and the state it last reached.
    survivor = 1 - stalls
    assert (
        f"StalledRankError: rank {stalls} did not reach the next agreement within 0:00:05 (the strategy's timeout); "
        f"last state: rank {stalls}: fitting.training (epoch 0, global step 3, batch 3)"
    ) in output
    # The stalled rank printed the stacks of its threads, its main thread where it hangs.
    assert f"rank {stalls} stalled; the stacks of its threads:" in output
    assert "in wait_for_what_never_comes" in output

    dumps = {path.name for path in tmp_path.glob("state-history-rank*")}
    stack_files = [name for name in dumps if name.startswith(f"state-history-rank{stalls}-") and name.endswith(".txt")]
    assert len(stack_files) == 1
    stack = (tmp_path / stack_files[0]).read_text()
    assert "in wait_for_what_never_comes" in stack and "in training_step" in stack
    stalled_history = load_history(str(tmp_path / stack_files[0].replace(".stack.txt", ".json")))
    assert stalled_history.records[-1].dest == "fitting.training"  # where it stopped: inside the epoch
    [survivor_dump] = [name for name in dumps if name.startswith(f"state-history-rank{survivor}-")]
    last = load_history(str(tmp_path / survivor_dump)).records[-1]
    assert last.trigger == "interrupt" and last.exception is not None
    # A timeout inside the strategy's own collectives raises the StalledRankError there; one inside autograd (DDP's
    # gradient all-reduce) or FSDP's gathers is a RuntimeError, named by the note of the edge that told the peers.
    named = f"rank {stalls} did not reach the next agreement"
    notes = [c.note or "" for c in last.callbacks if c.name == "notify_peers"]
    assert named in last.exception.message or named in notes[0]
