"""Two-process CPU sharding (gloo): speed against a hand-written FSDP2 loop, and each rank's memory against DDP.

`speed`: `statemachine.Trainer(strategy=FSDPStrategy(auto_wrap_policy={nn.Linear}))` against a hand-written loop
that shards the same MLP the same way (`fully_shard` on each Linear, then on the whole) and reads the same data
through a DistributedSampler (batch 32 per rank). Both sides fork two processes that join one gloo group (the
Trainer joins the group it finds), and rank 0 times the first batch's start to the last step. The two alternate
for `--rounds` rounds; the ratio is trainer/plain of the medians.

`memory`: after one optimizer step (Adam) of a 21M-parameter MLP, each rank's bytes of parameters plus optimizer
state, under DDPStrategy, FSDPStrategy and ModelParallelStrategy (the module shards itself in configure_model).

    python benchmarks/sharded.py speed [--steps 200] [--rounds 5]
    python benchmarks/sharded.py memory
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import statemachine as L
from devices.environments import LOOPBACK, find_free_port
from statemachine.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy

WORLD, BATCH_SIZE, LR = 2, 32, 0.01
SPEED_WIDTH, SPEED_DEPTH = 64, 4  # a small MLP: the per-step cost is the trainer's and FSDP's, not the matmuls
MEMORY_WIDTH, MEMORY_DEPTH = 2048, 5  # 5 x (2048 x 2048 + 2048) = 21.0M parameters


def make_net(width: int, depth: int) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def make_dataset(samples: int, width: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, width, generator=generator)
    return TensorDataset(x, x.roll(1, dims=1))


class Net(L.LightningModule):
    def __init__(self, width: int, depth: int, shard_itself: bool = False) -> None:
        super().__init__()
        self.net = make_net(width, depth)
        self.shard_itself = shard_itself

    def configure_model(self) -> None:
        if self.shard_itself:
            for layer in self.net:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=LR)


class Clock(L.Callback):
    def __init__(self) -> None:
        self.started = 0.0
        self.elapsed = 0.0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0 and self.started == 0.0:
            self.started = time.perf_counter()

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.elapsed = time.perf_counter() - self.started


def _trainer(strategy: Any, callbacks: list[L.Callback], **options: Any) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy=strategy,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **options,
    )


# ---- speed ---------------------------------------------------------------------------------------------------------


def _trainer_speed(steps: int) -> float:
    clock = Clock()
    trainer = _trainer(FSDPStrategy(auto_wrap_policy={nn.Linear}), [clock], max_epochs=1)
    loader = DataLoader(make_dataset(steps * BATCH_SIZE * WORLD, SPEED_WIDTH), batch_size=BATCH_SIZE)
    trainer.fit(Net(SPEED_WIDTH, SPEED_DEPTH), loader)
    return clock.elapsed


def _plain_speed(steps: int) -> float:
    model = make_net(SPEED_WIDTH, SPEED_DEPTH)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    dataset = make_dataset(steps * BATCH_SIZE * WORLD, SPEED_WIDTH)
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, WORLD, dist.get_rank(), shuffle=False)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    sampler.set_epoch(0)
    started = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return time.perf_counter() - started


# ---- memory --------------------------------------------------------------------------------------------------------


def _local_bytes(tensors: list[Tensor]) -> int:
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def _memory(kind: str) -> dict[str, int]:
    strategies: dict[str, Callable[[], Any]] = {
        "ddp": DDPStrategy,
        "fsdp": lambda: FSDPStrategy(auto_wrap_policy={nn.Linear}),
        "model_parallel": lambda: ModelParallelStrategy(data_parallel_size=WORLD, tensor_parallel_size=1),
    }
    trainer = _trainer(strategies[kind](), [], max_steps=1)
    model = Net(MEMORY_WIDTH, MEMORY_DEPTH, shard_itself=kind == "model_parallel")
    trainer.fit(model, DataLoader(make_dataset(WORLD * 8, MEMORY_WIDTH), batch_size=8))
    state = [v for s in trainer.optimizers[0].state.values() for v in s.values() if torch.is_tensor(v)]
    return {"parameters": _local_bytes(list(model.parameters())), "optimizer": _local_bytes(state)}


# ---- processes -----------------------------------------------------------------------------------------------------


def _worker(rank: int, port: int, job: Callable[..., Any], args: tuple[Any, ...], out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{LOOPBACK}:{port}", rank=rank, world_size=WORLD)
    result = job(*args)
    Path(f"{out}.{rank}").write_text(json.dumps(result))
    dist.destroy_process_group()


def in_two_processes(job: Callable[..., Any], *args: Any) -> list[Any]:
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "result")
        mp.start_processes(_worker, args=(find_free_port(), job, args, out), nprocs=WORLD, start_method="fork")
        return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(WORLD)]


def speed(steps: int, rounds: int) -> dict[str, Any]:
    sides = {"trainer": _trainer_speed, "plain": _plain_speed}
    for job in sides.values():
        in_two_processes(job, steps)  # warm-up
    times: dict[str, list[float]] = {side: [] for side in sides}
    for round_index in range(rounds):
        order = ("trainer", "plain") if round_index % 2 == 0 else ("plain", "trainer")
        for side in order:
            times[side].append(in_two_processes(sides[side], steps)[0])
    medians = {side: statistics.median(values) for side, values in times.items()}
    print(f"{'side':<8} {'median s':>9} {'min s':>8} {'max s':>8} {'us/step':>8}")
    for side, values in times.items():
        print(
            f"{side:<8} {medians[side]:>9.4f} {min(values):>8.4f} {max(values):>8.4f} "
            f"{medians[side] / steps * 1e6:>8.1f}"
        )
    ratio = medians["trainer"] / medians["plain"]
    print(f"ratio trainer/plain (medians): {ratio:.3f}")
    return {"steps": steps, "rounds": rounds, "times": times, "ratio_of_medians": ratio}


def memory() -> dict[str, Any]:
    report: dict[str, Any] = {}
    print(f"{'strategy':<15} {'rank':>4} {'parameters MB':>14} {'optimizer MB':>13} {'total MB':>9}")
    for kind in ("ddp", "fsdp", "model_parallel"):
        ranks = in_two_processes(_memory, kind)
        report[kind] = ranks
        for rank, held in enumerate(ranks):
            total = held["parameters"] + held["optimizer"]
            print(
                f"{kind:<15} {rank:>4} {held['parameters'] / 1e6:>14.1f} {held['optimizer'] / 1e6:>13.1f} "
                f"{total / 1e6:>9.1f}"
            )
    ddp = max(r["parameters"] + r["optimizer"] for r in report["ddp"])
    for kind in ("fsdp", "model_parallel"):
        ratio = max(r["parameters"] + r["optimizer"] for r in report[kind]) / ddp
        report[f"{kind}_to_ddp"] = ratio
        print(f"{kind} / ddp (largest rank): {ratio:.3f}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measure", choices=("speed", "memory"))
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per run (per rank), for speed")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    report = speed(options.steps, options.rounds) if options.measure == "speed" else memory()
    if options.json:
        Path(options.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
