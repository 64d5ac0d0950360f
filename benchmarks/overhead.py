"""Per-step overhead of `statemachine.Trainer` against a plain PyTorch loop doing the same work, in one process.

A tiny MLP (32 -> 64 -> 2), batch 32, 1280 optimizer steps per run, one torch thread. Both sides read the same
pre-built batches. Configurations:

- `off`: logger, checkpointing, progress bar, model summary and sanity check off; no validation.
- `log`: as `off`, plus one `self.log("train_loss", loss, prog_bar=True)` per training step.
- `simple`: as `off`, with `profiler="simple"` (its report is built, not printed): the profiler's cost.
- `defaults`: Lightning's defaults on (TensorBoard logger, a checkpoint at the epoch end, model summary, sanity
  check; `self.log` per step; the progress bar off, as it is when the output is not a terminal), with a
  2-batch validation at the epoch end, which the plain loop runs too.

With `off`, a third run times the floor: a hand-written Lightning-shaped loop doing the least any trainer with
Lightning's API must do per batch (see `run_floor`), so the table shows how much of the ratio is the trainer's own.

After a warm-up of each, the runs alternate for `--rounds` rounds; the table shows medians and the ratio of
medians trainer/plain (and floor/plain), then the median of each round's own trainer/plain ratio (the two runs of a
round are back to back, so a slow spell of the machine slows both) with its 95% bootstrap interval. `--log-calls N`
times `self.log` itself (N calls inside one training step) and the per-batch poll of the machine (the function
`Flow.poller("val_check")` gives the training loop, N calls).

`--lightning` also times Lightning's own Trainer and LightningModule around the same module code, interleaved.

    python benchmarks/overhead.py [--steps 1280] [--rounds 9] [--configs off,log,defaults] [--lightning] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import statemachine as L
from statemachine.profilers import SimpleProfiler

IN_FEATURES, HIDDEN, CLASSES, BATCH_SIZE, LR = 32, 64, 2, 32, 0.01
VAL_BATCHES = 2
CONFIGS = ("off", "log", "simple", "defaults")
Batch = tuple[Tensor, Tensor]


class PrebuiltBatches:
    """Pre-built batches behind a sized iterable (a plain list would be read as a list of loaders)."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.batches)


def make_batches(count: int, seed: int) -> PrebuiltBatches:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count * BATCH_SIZE, IN_FEATURES, generator=generator)
    y = torch.randint(0, CLASSES, (count * BATCH_SIZE,), generator=generator)
    return PrebuiltBatches(list(zip(x.split(BATCH_SIZE), y.split(BATCH_SIZE))))


def make_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


class MLPSteps:
    """The module's code, mixed into a LightningModule class: this project's, or Lightning's (`--lightning`)."""

    log: Callable[..., None]

    def __init__(self, train: PrebuiltBatches, val: PrebuiltBatches | None, log: bool) -> None:
        super().__init__()
        self.net = make_mlp()
        self._train, self._val, self._log = train, val, log

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self._log:
            self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=LR)

    def train_dataloader(self) -> PrebuiltBatches:
        return self._train


class ValidationSteps:
    """A 2-batch validation, mixed in before `MLPSteps`."""

    log: Callable[..., None]
    net: nn.Module
    _val: PrebuiltBatches | None

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def val_dataloader(self) -> PrebuiltBatches:
        assert self._val is not None
        return self._val


class SilentDescribe:
    """A profiler that builds the report (its cost counts) but does not print it."""

    _stage: str | None
    summary: Callable[[], str]
    teardown: Callable[[str | None], None]

    def describe(self) -> None:
        self.summary()
        self.teardown(self._stage)


class MLPModule(MLPSteps, L.LightningModule):
    pass


class ValidatingMLP(ValidationSteps, MLPModule):
    pass


class SilentSimpleProfiler(SilentDescribe, SimpleProfiler):
    pass


@dataclass(frozen=True)
class Flavour:
    """The classes a trainer run is made of: this project's, or Lightning's on the same module code."""

    name: str
    trainer: type
    module: type
    validating_module: type
    silent_profiler: type


OURS = Flavour("statemachine", L.Trainer, MLPModule, ValidatingMLP, SilentSimpleProfiler)


def lightning_flavour() -> Flavour:
    """Lightning's Trainer and LightningModule around the same code: `lightning.pytorch` (the dev extras install the
    version this project follows), else a standalone `pytorch_lightning`. The table's header names which."""
    for package in ("lightning.pytorch", "pytorch_lightning"):
        try:
            pl = importlib.import_module(package)
            profilers = importlib.import_module(f"{package}.profilers")
        except ImportError:
            continue
        module = type("MLPModule", (MLPSteps, pl.LightningModule), {})
        return Flavour(
            f"{package} {pl.__version__}",
            pl.Trainer,
            module,
            type("ValidatingMLP", (ValidationSteps, module), {}),
            type("SilentSimpleProfiler", (SilentDescribe, profilers.SimpleProfiler), {}),
        )
    raise SystemExit("--lightning needs lightning or pytorch_lightning installed")


def quiet_trainer(root: str, flavour: Flavour = OURS, **options: Any) -> Any:
    """One epoch with logger, checkpointing, progress bar, summary and sanity check off."""
    return flavour.trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        **options,
    )


def run_trainer(config: str, train: PrebuiltBatches, val: PrebuiltBatches, root: str, flavour: Flavour = OURS) -> int:
    if config == "defaults":
        model = flavour.validating_module(train, val, log=True)
        trainer = flavour.trainer(accelerator="cpu", max_epochs=1, enable_progress_bar=False, default_root_dir=root)
    else:
        model = flavour.module(train, None, log=config == "log")
        profiler = flavour.silent_profiler() if config == "simple" else None
        trainer = quiet_trainer(root, flavour, profiler=profiler)
    trainer.fit(model)
    return int(trainer.global_step)


def run_plain(config: str, train: PrebuiltBatches, val: PrebuiltBatches, root: str) -> int:
    """The calls Lightning makes for one automatic-optimization batch, in its order, and the same validation."""
    net = make_mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    net.train()
    steps = 0
    for x, y in train:
        with torch.enable_grad():
            loss = nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    if config == "defaults":
        net.eval()
        with torch.no_grad():
            losses = [nn.functional.cross_entropy(net(x), y) for x, y in val]
        net.train()
        float(torch.stack(losses).mean())
    return steps


def fetch_ahead(batches: PrebuiltBatches) -> Iterator[tuple[int, Batch, bool]]:
    """(index, batch, is_last), one batch fetched ahead: a loop knows the last batch before it runs it."""
    iterator = iter(batches)
    upcoming = next(iterator)
    for index, following in enumerate(iterator):
        yield index, upcoming, False
        upcoming = following
    yield len(batches) - 1, upcoming, True


def run_floor(train: PrebuiltBatches) -> int:
    """A Lightning-shaped loop at its least, hand-written: the module's own `training_step` (as users write it,
    through `self.net`), the last batch known before it runs, the batch's four progress counters, one stop check.
    No transfer, hooks, loss check, guards or logging: a lower bound for any trainer with Lightning's API."""
    module = MLPModule(train, None, log=False)
    optimizer = module.configure_optimizers()
    module.train()
    ready = started = processed = completed = 0
    for batch_idx, batch, is_last in fetch_ahead(train):
        ready += 1
        started += 1
        with torch.enable_grad():
            loss = module.training_step(batch, batch_idx)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        processed += 1
        completed += 1
        if is_last:
            break
    return completed


class LogTimer(MLPModule):
    """Times `calls` calls of one `self.log` inside a training step (the trainer is in its real logging state)."""

    def __init__(self, train: PrebuiltBatches, calls: int, **options: Any) -> None:
        super().__init__(train, None, log=False)
        self.calls, self.options, self.seconds = calls, options, 0.0

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss = super().training_step(batch, batch_idx)
        if batch_idx == 3:
            value = loss.detach()
            start = time.perf_counter()
            for _ in range(self.calls):
                self.log("timed", value, **self.options)
            self.seconds = time.perf_counter() - start
        return loss


def time_log_calls(calls: int, root: str) -> dict[str, float]:
    """Microseconds per `self.log` call, for the common forms."""
    forms = {
        "prog_bar=True": {"prog_bar": True},
        "default": {},
        "on_epoch=True": {"on_epoch": True},
    }
    result = {}
    for label, options in forms.items():
        samples = []
        for _ in range(3):
            model = LogTimer(make_batches(8, seed=1), calls, **options)
            quiet_trainer(root).fit(model)
            samples.append(model.seconds / calls * 1e6)
        result[label] = statistics.median(samples)
    return result


class PollTimer(LogTimer):
    """Times `calls` polls of the table's `val_check` candidates mid-epoch, with validation enabled (the guard
    walks Lightning's rules and says no): the per-batch cost of asking the machine."""

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss = MLPModule.training_step(self, batch, batch_idx)
        if batch_idx == 3:
            poll = self.trainer.run.flow.poller("val_check")  # what the training loop calls per batch
            start = time.perf_counter()
            for _ in range(self.calls):
                poll()
            self.seconds = time.perf_counter() - start
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def val_dataloader(self) -> PrebuiltBatches:
        return make_batches(2, seed=2)


def time_polls(calls: int, root: str) -> float:
    """Microseconds per `val_check` poll that finds no passing candidate (the common case)."""
    samples = []
    for _ in range(3):
        model = PollTimer(make_batches(8, seed=1), calls)
        quiet_trainer(root).fit(model)
        samples.append(model.seconds / calls * 1e6)
    return statistics.median(samples)


def timed(run: Callable[[], int]) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    steps = run()
    return time.perf_counter() - start, steps


def measure(config: str, steps: int, rounds: int, root: str, lightning: Flavour | None = None) -> dict[str, Any]:
    train, val = make_batches(steps, seed=0), make_batches(VAL_BATCHES, seed=2)
    runs = {
        "trainer": lambda: run_trainer(config, train, val, root),
        "plain": lambda: run_plain(config, train, val, root),
    }
    if config == "off":
        runs["floor"] = lambda: run_floor(train)
    if lightning is not None:  # its own log folder: the two trainers' version numbers stay apart
        runs["lightning"] = lambda: run_trainer(config, train, val, os.path.join(root, "lightning"), lightning)
    for name, run in runs.items():  # warm-up: imports, allocator, autograd caches
        _, made = timed(run)
        if made != steps:
            raise RuntimeError(f"{name} made {made} steps, expected {steps}")
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_index in range(rounds):
        order = list(runs) if round_index % 2 == 0 else list(reversed(runs))  # alternate who runs first
        for name in order:
            times[name].append(timed(runs[name])[0])
    median = {name: statistics.median(values) for name, values in times.items()}
    numbers: dict[str, Any] = {f"{name}_s": values for name, values in times.items()}
    numbers.update({f"{name}_us_per_step": median[name] / steps * 1e6 for name in runs})
    numbers["ratio"] = round(median["trainer"] / median["plain"], 3)
    paired = [trainer / plain for trainer, plain in zip(times["trainer"], times["plain"])]
    numbers["paired_ratio"] = round(statistics.median(paired), 3)
    numbers["paired_interval"] = [round(bound, 3) for bound in bootstrap_interval(paired)]
    for other in ("floor", "lightning"):
        if other in median:
            numbers[f"{other}_ratio"] = round(median[other] / median["plain"], 3)
    return numbers


def bootstrap_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """The 95% bootstrap interval of the median of `values` (a fixed seed: the same values give the same interval)."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def parse_configs(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The comma-separated configuration names of `--configs`; an unknown one ends the command with its name."""
    configs = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configs {unknown}; choose from {', '.join(CONFIGS)}")
    return configs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1280, help="optimizer steps per run (default 1280)")
    parser.add_argument("--rounds", type=int, default=9, help="timed runs of each, alternating (default 9)")
    parser.add_argument("--configs", default="off,log,simple,defaults", help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--log-calls", type=int, default=20000, help="self.log calls timed per form (0: skip)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, less noise)")
    parser.add_argument(
        "--lightning",
        action="store_true",
        help="also time Lightning's own Trainer (lightning.pytorch, from the dev extras, else pytorch_lightning) on "
        "the same module code, interleaved, in each configuration",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the numbers here as JSON")
    args = parser.parse_args(argv)
    configs = parse_configs(parser, args.configs)

    lightning = lightning_flavour() if args.lightning else None
    torch.set_num_threads(args.threads)
    result: dict[str, Any] = {
        "steps": args.steps,
        "rounds": args.rounds,
        "threads": args.threads,
        "model": f"{IN_FEATURES}->{HIDDEN}->{CLASSES} MLP, batch {BATCH_SIZE}",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "configs": {},
    }
    if lightning is not None:
        result["lightning"] = lightning.name
    print(f"{args.steps} steps/run, {args.rounds} rounds, threads={args.threads}, ", end="")
    print(f"torch {torch.__version__}, python {platform.python_version()}", end="")
    print(f", against {lightning.name}" if lightning is not None else "")
    print(f"{'config':<9} {'trainer us/step':>16} {'plain us/step':>14} {'ratio':>7} {'per round (95%)':>22}")
    with tempfile.TemporaryDirectory() as root:
        for config in configs:
            numbers = measure(config, args.steps, args.rounds, root, lightning)
            result["configs"][config] = numbers
            others = [
                f"{name}: {numbers[f'{name}_ratio']:.3f}"
                for name in ("floor", "lightning")
                if f"{name}_ratio" in numbers
            ]
            low, high = numbers["paired_interval"]
            print(
                f"{config:<9} {numbers['trainer_us_per_step']:16.1f} {numbers['plain_us_per_step']:14.1f} "
                f"{numbers['ratio']:7.3f} {numbers['paired_ratio']:7.3f} ({low:.3f}-{high:.3f})"
                + (f"   ({', '.join(others)})" if others else "")
            )
        if args.log_calls:
            per_call = time_log_calls(args.log_calls, root)
            result["self_log_us_per_call"] = per_call
            print("self.log in training_step, us per call: " + ", ".join(f"{k} {v:.2f}" for k, v in per_call.items()))
            result["poll_us_per_call"] = poll = time_polls(args.log_calls, root)
            print(f"val_check poll per batch, no candidate passing: {poll:.2f} us")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
