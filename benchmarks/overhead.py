"""Per-step overhead of `statemachine.Trainer` against a plain PyTorch loop, in one process.

A tiny MLP (32 -> 64 -> 10), batch 32, about 1000 optimizer steps per run. Both sides read the same pre-built
batches (or, with `--source dataloader`, the same DataLoader over an in-memory TensorDataset) and make the same
calls: forward, `zero_grad`, backward, `step`. The Trainer runs with progress bar, logger, checkpointing, model
summary and the sanity check off. After a warm-up of each, the two alternate for `--rounds` rounds (the first
of each pair alternates too); the table shows the median time per run, per step, and the ratio trainer/plain.

    python benchmarks/overhead.py [--steps 1000] [--rounds 5] [--json PATH] [--profile N] [--profiler simple]

Trainer times include building the Trainer and `fit`'s setup and teardown (fixed costs, spread over the steps);
plain times include building the optimizer. `--profile N` runs the trainer once more under cProfile and prints
the N functions with the highest own time (tottime), with their cost per training batch. `--profiler simple`
adds a third run, the trainer with `Trainer(profiler="simple")` (its report is built but not printed), alternating
with the other two; the difference of its time to the trainer's is the simple profiler's cost per batch.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import json
import platform
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L
from statemachine.profilers import SimpleProfiler

IN_FEATURES, HIDDEN, CLASSES, BATCH_SIZE, LR = 32, 64, 10, 32, 0.01
Batch = tuple[Tensor, Tensor]


class PrebuiltBatches:
    """Pre-built batches behind a sized iterable (a plain list would be read as a list of loaders)."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.batches)


def make_data(steps: int, source: str) -> PrebuiltBatches | DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps * BATCH_SIZE, IN_FEATURES, generator=generator)
    y = torch.randint(0, CLASSES, (steps * BATCH_SIZE,), generator=generator)
    if source == "dataloader":
        return DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=False)
    return PrebuiltBatches(list(zip(x.split(BATCH_SIZE), y.split(BATCH_SIZE))))


def make_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


class MLPModule(L.LightningModule):
    def __init__(self, data: PrebuiltBatches | DataLoader) -> None:
        super().__init__()
        self.net = make_mlp()
        self._data = data

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=LR)

    def train_dataloader(self) -> PrebuiltBatches | DataLoader:
        return self._data


def run_trainer(data: PrebuiltBatches | DataLoader, root: str, profiler: str | None = None) -> int:
    model = MLPModule(data)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        profiler=None if profiler is None else SilentSimpleProfiler(),
    )
    trainer.fit(model)
    return int(trainer.global_step)


class SilentSimpleProfiler(SimpleProfiler):
    """Builds the report (its cost counts) but does not print it."""

    def describe(self) -> None:
        self.summary()
        self.teardown(self._stage)


def run_plain(data: PrebuiltBatches | DataLoader, root: str) -> int:
    """The calls Lightning makes for one automatic-optimization batch, in its order (reference 5.2)."""
    net = make_mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    net.train()
    steps = 0
    for x, y in data:
        with torch.enable_grad():
            loss = nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps


def timed(run: Callable[[Any, str], int], data: PrebuiltBatches | DataLoader, root: str) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    steps = run(data, root)
    return time.perf_counter() - start, steps


def profile_trainer(
    run: Callable[[Any, str], int], data: PrebuiltBatches | DataLoader, root: str, steps: int, top: int
) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    run(data, root)
    profiler.disable()
    stats = pstats.Stats(profiler)
    lines = [f"cProfile of one trainer run ({steps} steps), top {top} by tottime; per batch = tottime / {steps}:"]
    lines.append(f"{'tottime s':>10} {'us/batch':>9} {'cum us/b':>9} {'calls':>8}  function")
    entries = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:top]
    for (filename, line, name), (_, calls, tottime, cumtime, _) in entries:
        where = _short(filename)
        per_batch, cumulative = tottime / steps * 1e6, cumtime / steps * 1e6
        lines.append(f"{tottime:10.4f} {per_batch:9.2f} {cumulative:9.2f} {calls:8d}  {where}:{line}({name})")
    return "\n".join(lines)


def _short(filename: str) -> str:
    path = Path(filename)
    for marker in ("statemachine", "stages", "devices", "torch", "transitions"):
        if marker in path.parts:
            index = len(path.parts) - 1 - path.parts[::-1].index(marker)
            return "/".join(path.parts[index:])
    return filename


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps per run (default 1000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each, alternating (default 5)")
    parser.add_argument("--source", choices=("tensors", "dataloader"), default="tensors")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, less noise)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the numbers here as JSON")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the top N cProfile entries")
    parser.add_argument("--profiler", choices=("simple",), default=None, help="also time the trainer with it")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    data = make_data(args.steps, args.source)
    runs: dict[str, Callable[[Any, str], int]] = {"trainer": run_trainer, "plain": run_plain}
    profiled = f"+{args.profiler}"
    if args.profiler:
        runs[profiled] = functools.partial(run_trainer, profiler=args.profiler)
    times: dict[str, list[float]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory() as root:
        for name, run in runs.items():  # warm-up: imports, allocator, autograd caches
            _, steps = timed(run, data, root)
            if steps != args.steps:
                raise RuntimeError(f"{name} made {steps} steps, expected {args.steps}")
        for round_index in range(args.rounds):
            shift = round_index % len(runs)
            order = list(runs)[shift:] + list(runs)[:shift]
            for name in order:
                seconds, _ = timed(runs[name], data, root)
                times[name].append(seconds)
        profiled_run = runs[profiled] if args.profiler else run_trainer
        profile = profile_trainer(profiled_run, data, root, args.steps, args.profile) if args.profile else None

    median = {name: statistics.median(values) for name, values in times.items()}
    ratio = median["trainer"] / median["plain"]
    min_ratio = min(times["trainer"]) / min(times["plain"])
    overhead_us = (median["trainer"] - median["plain"]) / args.steps * 1e6
    print(f"{args.steps} steps/run, {args.rounds} rounds, source={args.source}, threads={args.threads}, ", end="")
    print(f"torch {torch.__version__}, python {platform.python_version()}")
    print(f"{'run':<9} {'median s':>9} {'min s':>8} {'max s':>8} {'us/step':>8}")
    for name, values in times.items():
        per_step = median[name] / args.steps * 1e6
        print(f"{name:<9} {median[name]:9.4f} {min(values):8.4f} {max(values):8.4f} {per_step:8.1f}")
    print(f"overhead: {overhead_us:.1f} us/step")
    print(f"ratio trainer/plain: {ratio:.3f}  (of medians; of minimums: {min_ratio:.3f})")
    profiler_us = None
    if args.profiler:
        profiler_us = (median[profiled] - median["trainer"]) / args.steps * 1e6
        min_profiler_us = (min(times[profiled]) - min(times["trainer"])) / args.steps * 1e6
        print(
            f"{args.profiler} profiler: {profiler_us:+.1f} us/step  (of medians; of minimums: {min_profiler_us:+.1f})"
        )
    if profile:
        print()
        print(profile)

    result: dict[str, Any] = {
        "steps": args.steps,
        "rounds": args.rounds,
        "source": args.source,
        "threads": args.threads,
        "profiler": args.profiler,
        "batch_size": BATCH_SIZE,
        "model": f"{IN_FEATURES}->{HIDDEN}->{CLASSES} MLP",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "trainer_s": times["trainer"],
        "plain_s": times["plain"],
        "trainer_median_s": median["trainer"],
        "plain_median_s": median["plain"],
        "trainer_us_per_step": median["trainer"] / args.steps * 1e6,
        "plain_us_per_step": median["plain"] / args.steps * 1e6,
        "overhead_us_per_step": overhead_us,
        "ratio": round(ratio, 3),
        "ratio_of_minimums": round(min_ratio, 3),
    }
    if args.profiler:
        result[f"trainer{profiled}_s"] = times[profiled]
        result["profiler_us_per_step"] = profiler_us
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
