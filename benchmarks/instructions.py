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


def count(side: str, config: str, steps: int, layout: int) -> int:
    """The instructions callgrind counts for one process running `side` (all its threads together), in memory
    layout number `layout` (see `measure`)."""
    # One OpenBLAS thread: numpy's pool spins for a varying while under valgrind and blurs the count. A fixed hash
    # seed: with str hashes random per process, dict and set probing differs and two identical runs differ by
    # millions of instructions. A fixed environment, argv and working directory: they sit on the new process's
    # stack, so with the caller's environment a count depends on the shell it was started from. `BENCH_LAYOUT`
    # shifts where the process's data lands, one layout per number.
    env = {
        "PATH": os.defpath,
        "LANG": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "BENCH_LAYOUT": "x" * (37 * layout),
    }
    here = os.path.dirname(os.path.abspath(__file__))
    command = [
        shutil.which("valgrind") or "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        os.path.join(here, "instructions.py"),
        "--child",
        side,
        config,
        str(steps),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=here, check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{side} {config} {steps} steps under callgrind failed:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def measure(configs: list[str], short: int, long: int, jobs: int, layouts: int) -> dict[str, dict[str, Any]]:
    """Each side's instructions per step, averaged over `layouts` memory layouts. Within one layout a count repeats
    to a few instructions; between layouts the same side moves by up to several thousand a step (objects hashed by
    address probe dicts differently, data lands at other alignments), so a single layout can favour either side."""
    runs = [
        (config, side, steps, layout)
        for config in configs
        for side in SIDES
        if side != "floor" or config == "off"
        for layout in range(layouts)
        for steps in (short, long)
    ]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        totals = dict(zip(runs, pool.map(lambda run: count(run[1], run[0], run[2], run[3]), runs)))
    result: dict[str, dict[str, Any]] = {}
    for config in configs:
        sides = [side for side in SIDES if (config, side, short, 0) in totals]
        by_layout = {
            side: [
                (totals[config, side, long, layout] - totals[config, side, short, layout]) / (long - short)
                for layout in range(layouts)
            ]
            for side in sides
        }
        per_step = {side: sum(values) / layouts for side, values in by_layout.items()}
        numbers: dict[str, Any] = {f"{side}_instructions_per_step": round(value) for side, value in per_step.items()}
        numbers.update({f"{side}_by_layout": [round(v) for v in values] for side, values in by_layout.items()})
        ratios = [t / p for t, p in zip(by_layout["trainer"], by_layout["plain"])]
        numbers["ratio"] = round(per_step["trainer"] / per_step["plain"], 4)
        numbers["ratio_range"] = [round(min(ratios), 4), round(max(ratios), 4)]
        if "floor" in per_step:
            numbers["floor_ratio"] = round(per_step["floor"] / per_step["plain"], 4)
        result[config] = numbers
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="off,log,defaults", help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--steps", default="64,1088", help="the short and the long epoch's steps (default 64,1088)")
    parser.add_argument("--jobs", type=int, default=2, help="processes under callgrind at once (default 2)")
    parser.add_argument("--layouts", type=int, default=3, help="memory layouts averaged over (default 3)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the numbers here as JSON")
    args = parser.parse_args(argv)
    configs = parse_configs(parser, args.configs)
    try:
        short, long = (int(part) for part in args.steps.split(","))
    except ValueError:
        parser.error(f"--steps {args.steps!r} must be two step counts, the short first, e.g. 64,1088")
    if not 0 < short < long:
        parser.error(f"--steps {args.steps!r} must be two step counts, the short first, e.g. 64,1088")
    if args.layouts < 1:
        parser.error(f"--layouts {args.layouts} must be at least 1")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on PATH (Debian: apt-get install valgrind)")

    result = measure(configs, short, long, args.jobs, args.layouts)
    print(
        f"instructions per step (callgrind, {short} and {long} steps, mean of {args.layouts} memory layouts), "
        f"torch {torch.__version__}"
    )
    print(f"{'config':<9} {'trainer':>10} {'plain':>10} {'ratio':>7}  {'per layout':>15}")
    for config, numbers in result.items():
        low, high = numbers["ratio_range"]
        floor = f"   (floor: {numbers['floor_ratio']:.4f})" if "floor_ratio" in numbers else ""
        print(
            f"{config:<9} {numbers['trainer_instructions_per_step']:10d} {numbers['plain_instructions_per_step']:10d} "
            f"{numbers['ratio']:7.4f}  {low:.4f}-{high:.4f}{floor}"
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
