"""Per-step overhead of the Trainer in CPU instructions, counted by valgrind's callgrind: the same runs as
`overhead.py`, told apart by a count that repeats to within a few hundred instructions a step, where wall times on
a small, shared machine move by 3% between runs.

Each side runs in its own process under callgrind three times, after a 64-step warm-up run: with a short epoch,
with a long one, and with none (the short epoch's batches built, not run). The difference of the first two totals
over the difference of the step counts is that side's instructions per step, free of imports, warm-up and each
run's fixed work; the short run less the one without an epoch, less its steps, is the fixed work of one run
(construction, setup, summary, sanity check, checkpoint, teardown). The ratio trainer/plain (and floor/plain with
`off`) per step is the per-step part of `overhead.py`'s ratio; the run ratio adds each side's fixed work to
`--run-steps` steps (overhead.py's 1280 by default), the whole of what `overhead.py` times. What instructions do
not show (cache misses, system calls, the disk) only wall time can show.

    python benchmarks/instructions.py [--configs off,log,defaults] [--steps 64,1088] [--run-steps 1280] [--json PATH]

Needs `valgrind` on PATH (Debian: `apt-get install valgrind`). A run of the three configurations takes about ten
minutes on two cores (the processes run two at a time).
"""

from __future__ import annotations

import argparse
import gc
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
from overhead import CONFIGS, PrebuiltBatches, make_batches, parse_configs, run_floor, run_plain, run_trainer

SIDES = ("trainer", "plain", "floor")
_COLLECTED = re.compile(r"Collected : (\d+)")


def run_side(side: str, config: str, steps: int, runs: bool = True) -> None:
    """In the counted process: a warm-up run of 64 steps, then one of `steps` (`runs` False: its batches are built,
    the run is left out, so that the difference of the two counts is the run alone)."""
    torch.set_num_threads(1)
    val = make_batches(2, seed=2)
    warm_up, epoch = make_batches(64, seed=1), make_batches(steps, seed=0)
    with tempfile.TemporaryDirectory() as root:
        run_once(side, config, warm_up, val, root)
        # What imports and the warm-up left is collected once and frozen out of later collections: otherwise a full
        # collection of that heap (millions of instructions) falls into the long run or the short one by chance.
        gc.collect()
        gc.freeze()
        if runs:
            run_once(side, config, epoch, val, root)


def run_once(side: str, config: str, batches: PrebuiltBatches, val: PrebuiltBatches, root: str) -> None:
    if side == "trainer":
        made = run_trainer(config, batches, val, root)
    elif side == "floor":
        made = run_floor(batches)
    else:
        made = run_plain(config, batches, val, root)
    if made != len(batches):
        raise RuntimeError(f"{side} made {made} steps, expected {len(batches)}")


def count(side: str, config: str, steps: int, layout: int, runs: bool = True) -> int:
    """The instructions callgrind counts for one process running `side` (all its threads together), in memory
    layout number `layout` (see `measure`); `runs` False leaves the counted run out (see `run_side`)."""
    # One OpenBLAS thread: numpy's pool spins for a varying while under valgrind and blurs the count. A fixed hash
    # seed: with str hashes random per process, dict and set probing differs and two identical runs differ by
    # millions of instructions. A fixed environment, argv and working directory: they sit on the new process's
    # stack, so with the caller's environment a count depends on the shell it was started from. `BENCH_LAYOUT`
    # shifts where the process's data lands, one layout per number. No bytecode written: after a source edit the
    # first child to import a module would compile and cache it and its concurrent sibling not, tens of millions
    # of instructions on one side only; without the cache every child compiles the same modules.
    env = {
        "PATH": os.defpath,
        "LANG": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
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
        *([] if runs else ["--no-run"]),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=here, check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{side} {config} {steps} steps under callgrind failed:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def measure(
    configs: list[str], short: int, long: int, jobs: int, layouts: int, run_steps: int
) -> dict[str, dict[str, Any]]:
    """Each side's instructions per step and fixed work per run, averaged over `layouts` memory layouts. Within one
    layout a count repeats to a few instructions; between layouts the same side moves by up to several thousand a
    step (objects hashed by address probe dicts differently, data lands at other alignments), so a single layout
    can favour either side."""
    # steps None: the short run's batches built, the run left out
    runs = [
        (config, side, steps, layout)
        for config in configs
        for side in SIDES
        if side != "floor" or config == "off"
        for layout in range(layouts)
        for steps in (short, long, None)
    ]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        counted = pool.map(lambda run: count(run[1], run[0], run[2] or short, run[3], runs=run[2] is not None), runs)
        totals = dict(zip(runs, counted))
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
        fixed = {
            side: sum(
                totals[config, side, short, layout] - totals[config, side, None, layout] - short * step
                for layout, step in enumerate(by_layout[side])
            )
            / layouts
            for side in sides
        }
        whole = {side: fixed[side] + run_steps * per_step[side] for side in sides}
        numbers: dict[str, Any] = {f"{side}_instructions_per_step": round(value) for side, value in per_step.items()}
        numbers.update({f"{side}_fixed_instructions": round(value) for side, value in fixed.items()})
        numbers.update({f"{side}_by_layout": [round(v) for v in values] for side, values in by_layout.items()})
        ratios = [t / p for t, p in zip(by_layout["trainer"], by_layout["plain"])]
        numbers["ratio"] = round(per_step["trainer"] / per_step["plain"], 4)
        numbers["ratio_range"] = [round(min(ratios), 4), round(max(ratios), 4)]
        numbers["run_steps"] = run_steps
        numbers["run_ratio"] = round(whole["trainer"] / whole["plain"], 4)
        if "floor" in per_step:
            numbers["floor_ratio"] = round(per_step["floor"] / per_step["plain"], 4)
        result[config] = numbers
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="off,log,defaults", help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--steps", default="64,1088", help="the short and the long epoch's steps (default 64,1088)")
    parser.add_argument("--run-steps", type=int, default=1280, help="steps of the run in the run ratio (default 1280)")
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
    if args.run_steps < 1:
        parser.error(f"--run-steps {args.run_steps} must be at least 1")
    if args.layouts < 1:
        parser.error(f"--layouts {args.layouts} must be at least 1")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on PATH (Debian: apt-get install valgrind)")

    result = measure(configs, short, long, args.jobs, args.layouts, args.run_steps)
    print(
        f"instructions per step (callgrind, {short} and {long} steps, mean of {args.layouts} memory layouts), fixed "
        f"work per run in millions, and the ratio of a {args.run_steps}-step run with it, torch {torch.__version__}"
    )
    print(f"{'config':<9} {'trainer':>10} {'plain':>10} {'ratio':>7}  {'per layout':>15}  {'fixed M':>11}  {'run':>6}")
    for config, numbers in result.items():
        low, high = numbers["ratio_range"]
        fixed = f"{numbers['trainer_fixed_instructions'] / 1e6:5.1f}/{numbers['plain_fixed_instructions'] / 1e6:5.1f}"
        floor = f"   (floor: {numbers['floor_ratio']:.4f})" if "floor_ratio" in numbers else ""
        print(
            f"{config:<9} {numbers['trainer_instructions_per_step']:10d} {numbers['plain_instructions_per_step']:10d} "
            f"{numbers['ratio']:7.4f}  {low:.4f}-{high:.4f}  {fixed:>11}  {numbers['run_ratio']:6.4f}{floor}"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        run_side(sys.argv[2], sys.argv[3], int(sys.argv[4]), runs=sys.argv[5:6] != ["--no-run"])
    else:
        main()
