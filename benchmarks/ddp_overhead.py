"""Two-process CPU DDP (gloo): `statemachine.Trainer(strategy="ddp_fork", devices=2)` against a hand-written
two-process DDP loop on the same model, data and sampler.

Both sides fork two processes, join a gloo process group, wrap the same MLP (32 -> 64 -> 10) in
DistributedDataParallel and read the same TensorDataset through a DistributedSampler (batch 32 per rank). Each
run is timed on rank 0 from the epoch's start (before the loader's iterator is made) to the last optimizer
step (process start, rendezvous and teardown excluded on both sides). The two alternate for `--rounds` rounds;
the ratio is trainer/plain of the medians.

`--one-group`: both sides run in the same two processes and process group, alternating inside them (the Trainer,
with `strategy="ddp"`, joins the group it finds), after one warm-up round: no process start, placement or new
sockets between the sides, which on a small machine move a run's time more than the trainer does.

    python benchmarks/ddp_overhead.py [--steps 300] [--rounds 5] [--one-group] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import statemachine as L
from devices.environments import LOOPBACK, find_free_port

IN_FEATURES, HIDDEN, CLASSES, BATCH_SIZE, LR = 32, 64, 10, 32, 0.01
WORLD = 2
SIDES = ("trainer", "plain")


def make_dataset(steps: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    samples = steps * BATCH_SIZE * WORLD
    x = torch.randn(samples, IN_FEATURES, generator=generator)
    y = torch.randint(0, CLASSES, (samples,), generator=generator)
    return TensorDataset(x, y)


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LR)


class Clock(L.Callback):
    """Each rank's time from the epoch's start (before its loader's iterator is made, where the plain loop's clock
    starts) to the end of training; rank 0's also written to `path` (when the fit ran in processes of its own). No
    hook of its own per batch: a user's trainer without callbacks would not run one."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.started = 0.0
        self.elapsed = 0.0

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.started = time.perf_counter()

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.elapsed = time.perf_counter() - self.started
        if trainer.global_rank == 0 and self.path is not None:
            Path(self.path).write_text(str(self.elapsed))


def fit_timed(steps: int, strategy: str, path: str | None = None) -> float:
    clock = Clock(path)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy=strategy,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[clock],
    )
    trainer.fit(Net(), DataLoader(make_dataset(steps), batch_size=BATCH_SIZE))
    return clock.elapsed


def run_trainer(steps: int, out: str) -> float:
    fit_timed(steps, "ddp_fork", out)
    return float(Path(out).read_text())


def plain_loop(steps: int) -> float:
    """The hand-written loop in a process of an initialised 2-process group: this rank's time."""
    rank = dist.get_rank()
    model = DistributedDataParallel(make_net())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    dataset = make_dataset(steps)
    sampler = DistributedSampler(dataset, WORLD, rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    sampler.set_epoch(0)
    started = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - started


def _join_group(rank: int, port: int) -> None:
    torch.set_num_threads(1)  # what ddp_fork does in each rank
    dist.init_process_group("gloo", init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=WORLD)


def _plain_worker(rank: int, steps: int, port: int, out: str) -> None:
    _join_group(rank, port)
    seconds = plain_loop(steps)
    if rank == 0:
        Path(out).write_text(str(seconds))
    dist.destroy_process_group()


def run_plain(steps: int, out: str) -> float:
    mp.start_processes(_plain_worker, args=(steps, find_free_port(), out), nprocs=WORLD, start_method="fork")
    return float(Path(out).read_text())


def alternate(rounds: int, run: Callable[[str], float]) -> dict[str, list[float]]:
    """Each side's seconds from `run(side)`: once each to warm up, then `rounds` rounds, the side that goes first
    alternating."""
    for side in SIDES:
        run(side)
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_index in range(rounds):
        for side in SIDES if round_index % 2 == 0 else SIDES[::-1]:
            times[side].append(run(side))
    return times


def _one_group_worker(rank: int, steps: int, rounds: int, port: int, out: str) -> None:
    """Both sides, alternating, in this process: rank 0 writes each side's times."""
    _join_group(rank, port)

    def run(side: str) -> float:
        gc.collect()  # what the side before left behind is not collected during this one
        return fit_timed(steps, "ddp") if side == "trainer" else plain_loop(steps)

    times = alternate(rounds, run)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def in_one_group(steps: int, rounds: int, out: str) -> dict[str, list[float]]:
    args = (steps, rounds, find_free_port(), out)
    mp.start_processes(_one_group_worker, args=args, nprocs=WORLD, start_method="fork")
    times: dict[str, list[float]] = json.loads(Path(out).read_text())
    return times


def in_processes_of_their_own(steps: int, rounds: int, out: str) -> dict[str, list[float]]:
    return alternate(rounds, lambda side: (run_trainer if side == "trainer" else run_plain)(steps, out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run (per rank)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one-group", action="store_true", help="both sides in the same two processes")
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        measure = in_one_group if options.one_group else in_processes_of_their_own
        times = measure(options.steps, options.rounds, os.path.join(scratch, "seconds"))
    medians = {side: statistics.median(values) for side, values in times.items()}
    ratio = medians["trainer"] / medians["plain"]
    print(f"{'side':<8} {'median s':>9} {'min s':>8} {'max s':>8} {'us/step':>8}")
    for side, values in times.items():
        per_step = medians[side] / options.steps * 1e6
        print(f"{side:<8} {medians[side]:>9.4f} {min(values):>8.4f} {max(values):>8.4f} {per_step:>8.1f}")
    print(f"ratio trainer/plain (medians): {ratio:.3f}")
    if options.json:
        report = {
            "steps": options.steps,
            "rounds": options.rounds,
            "one_group": options.one_group,
            "times": times,
            "ratio_of_medians": ratio,
        }
        Path(options.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
