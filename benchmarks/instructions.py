"""Per-step overhead of the Trainer in CPU instructions, counted by valgrind's callgrind: the same runs as
`overhead.py`, told apart by a count that repeats to within a few hundred instructions a step, where wall times on
a small, shared machine move by 3% between runs.

Each side runs in its own process under callgrind twice, with a short and a long epoch (after a warm-up run of
the short one); the difference of the two totals over the difference of the step counts is that side's
instructions per step, free of imports, warm-up and each run's fixed work. The ratio trainer/plain (and
floor/plain with `off`) is the per-step part of `overhead.py`'s ratio; what it leaves out is the fixed work per
run and what instructions do not show (cache misses, system calls, the disk), which only wall time can show.

    python benchmarks/instructions.py [--configs off,log,defaults] [--steps 64,1088] [--json PATH]

Needs `valgrind` on PATH (Debian: `apt-get install valgrind`). A run of the three configurations takes about ten
minutes on two cores (the processes run two at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from overhead import CONFIGS, make_batches, parse_configs, run_floor, run_plain, run_trainer

SIDES = ("trainer", "plain", "floor")
_COLLECTED = re.compile(r"Collected : (\d+)")


def run_side(side: str, config: str, steps: int) -> None:
    """In the counted process: a warm-up run of 64 steps, then one of `steps`."""
    torch.set_num_threads(1)
    val = make_batches(2, seed=2)
    with tempfile.TemporaryDirectory() as root:
        for batches in (make_batches(64, seed=1), make_batches(steps, seed=0)):
            if side == "trainer":
                made = run_trainer(config, batches, val, root)
            elif side == "floor":
                made = run_floor(batches)
            else:
                made = run_plain(config, batches, val, root)
            if made != len(batches):
                raise RuntimeError(f"{side} made {made} steps, expected {len(batches)}")


def count(side: str, config: str, steps: int) -> int:
    """The instructions callgrind counts for one process running `side` (all its threads together)."""
    # One OpenBLAS thread: numpy's pool spins for a varying while under valgrind and blurs the count. A fixed hash
    # seed: with str hashes random per process, dict and set probing differs and two identical runs differ by
    # millions of instructions; with it, by about two thousand.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        side,
        config,
        str(steps),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{side} {config} {steps} steps under callgrind failed:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def measure(configs: list[str], short: int, long: int, jobs: int) -> dict[str, dict[str, float]]:
    runs = [
        (config, side, steps)
        for config in configs
        for side in SIDES
        if side != "floor" or config == "off"
        for steps in (short, long)
    ]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        totals = dict(zip(runs, pool.map(lambda run: count(run[1], run[0], run[2]), runs)))
    result: dict[str, dict[str, float]] = {}
    for config in configs:
        per_step = {
            side: (totals[config, side, long] - totals[config, side, short]) / (long - short)
            for side in SIDES
            if (config, side, short) in totals
        }
        numbers = {f"{side}_instructions_per_step": round(value) for side, value in per_step.items()}
        numbers["ratio"] = round(per_step["trainer"] / per_step["plain"], 4)
        if "floor" in per_step:
            numbers["floor_ratio"] = round(per_step["floor"] / per_step["plain"], 4)
        result[config] = numbers
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="off,log,defaults", help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--steps", default="64,1088", help="the short and the long epoch's steps (default 64,1088)")
    parser.add_argument("--jobs", type=int, default=2, help="processes under callgrind at once (default 2)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the numbers here as JSON")
    args = parser.parse_args(argv)
    configs = parse_configs(parser, args.configs)
    try:
        short, long = (int(part) for part in args.steps.split(","))
    except ValueError:
        parser.error(f"--steps {args.steps!r} must be two step counts, the short first, e.g. 64,1088")
    if not 0 < short < long:
        parser.error(f"--steps {args.steps!r} must be two step counts, the short first, e.g. 64,1088")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on PATH (Debian: apt-get install valgrind)")

    result = measure(configs, short, long, args.jobs)
    print(f"instructions per step (callgrind, {short} and {long} steps), torch {torch.__version__}")
    print(f"{'config':<9} {'trainer':>10} {'plain':>10} {'ratio':>7}")
    for config, numbers in result.items():
        floor = f"   (floor: {numbers['floor_ratio']:.4f})" if "floor_ratio" in numbers else ""
        print(
            f"{config:<9} {numbers['trainer_instructions_per_step']:10d} {numbers['plain_instructions_per_step']:10d} "
            f"{numbers['ratio']:7.4f}{floor}"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        run_side(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
