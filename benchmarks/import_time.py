"""Import time: `import statemachine as L; L.Trainer` against `import torch`, each in fresh processes.

The trainer needs torch, so what matters is what it adds on top. Runs alternate between the commands; the
table shows medians. The children may write bytecode (`PYTHONDONTWRITEBYTECODE` is left out of their
environment) and each command runs once untimed first, so that what is timed is importing, not compiling the
project's modules.

    python benchmarks/import_time.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "torch": "import torch",
    "trainer": "import statemachine as L; L.Trainer",
    "statemachine": "import statemachine",
}


ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def seconds(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=ENVIRONMENT)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per command (default 9)")
    args = parser.parse_args(argv)
    for code in COMMANDS.values():  # writes the bytecode caches
        seconds(code)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, code in COMMANDS.items():
            times[name].append(seconds(code))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:<13} {value:6.3f} s  ({COMMANDS[name]})")
    print(f"trainer - torch: {medians['trainer'] - medians['torch']:+.3f} s")
    return medians


if __name__ == "__main__":
    main()
