"""ThroughputMonitor: batches, samples (and items, FLOPs) per second of each stage, logged under Lightning's
names such as `train/samples` and `train/device/samples_per_sec`."""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from stages.callbacks.callback import Callback
from stages.exceptions import TrainerWarning


class _IncreasingWindow(deque):
    """The last `maxlen` values of a counter that only grows (a rate needs its first and last values)."""

    def append(self, value: Any) -> None:
        if self and value <= self[-1]:
            raise ValueError(f"a throughput counter must increase: {value} after {self[-1]}")
        super().append(value)


class Throughput:
    """Rates over the last `window_size` updates; counters are cumulative since the stage started."""

    def __init__(self, world_size: int = 1, window_size: int = 100, separator: str = "/") -> None:
        self.separator = separator
        self.world_size = world_size
        self._time = _IncreasingWindow(maxlen=window_size)
        self._batches = _IncreasingWindow(maxlen=window_size)
        self._samples = _IncreasingWindow(maxlen=window_size)
        self._lengths = _IncreasingWindow(maxlen=window_size)
        self._flops: deque[float] = deque(maxlen=window_size)

    def update(
        self, *, time: float, batches: int, samples: int, lengths: int | None = None, flops: float | None = None
    ) -> None:
        if samples < batches:
            raise ValueError(f"samples ({samples}) must be at least batches ({batches}): check batch_size_fn")
        self._time.append(time)
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(f"lengths ({lengths}) must be at least samples ({samples}): check length_fn")
            self._lengths.append(lengths)
        if flops is not None:
            self._flops.append(flops * self.world_size)

    def compute(self) -> dict[str, float]:
        sep = self.separator
        metrics: dict[str, float] = {
            "time": self._time[-1],
            "batches": self._batches[-1],
            "samples": self._samples[-1],
        }
        if self._lengths:
            metrics["lengths"] = self._lengths[-1]
        if len(self._time) < (self._time.maxlen or 0):
            return metrics  # rates only once the window is full
        elapsed = self._time[-1] - self._time[0]
        metrics[f"device{sep}batches_per_sec"] = (self._batches[-1] - self._batches[0]) / elapsed
        metrics[f"device{sep}samples_per_sec"] = (self._samples[-1] - self._samples[0]) / elapsed
        if len(self._lengths) == self._lengths.maxlen:
            metrics[f"device{sep}items_per_sec"] = (self._lengths[-1] - self._lengths[0]) / elapsed
        if len(self._flops) == self._flops.maxlen:
            # the first entry's FLOPs were spent before the window's first time stamp
            metrics[f"device{sep}flops_per_sec"] = (sum(self._flops) - self._flops[0]) / elapsed / self.world_size
        return metrics

    def reset(self) -> None:
        for window in (self._time, self._batches, self._samples, self._lengths, self._flops):
            window.clear()


class ThroughputMonitor(Callback):
    """After each training step (not mid-accumulation) and each evaluation or predict batch, logs
    `{stage}/time`, `{stage}/batches`, `{stage}/samples` (and `{stage}/lengths` with `length_fn`) since the stage
    started, and once `window_size` updates are in, `{stage}/device/batches_per_sec`,
    `{stage}/device/samples_per_sec`, `{stage}/device/items_per_sec` and, when the module has a
    `flops_per_batch` attribute, `{stage}/device/flops_per_sec`. Stages: train, validate, test, predict.
    Values are sent every `log_every_n_steps` like `self.log`'s. Model FLOPs utilisation (`mfu`) is not computed
    (this project has no table of device peak FLOPs). Validation time does not count against training."""

    def __init__(
        self,
        batch_size_fn: Callable[[Any], int],
        length_fn: Callable[[Any], int] | None = None,
        window_size: int = 100,
        separator: str = "/",
    ) -> None:
        if not callable(batch_size_fn):
            raise TypeError(f"batch_size_fn {batch_size_fn!r} must be a function of the batch")
        if length_fn is not None and not callable(length_fn):
            raise TypeError(f"length_fn {length_fn!r} must be a function of the batch or None")
        if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 2:
            raise ValueError(f"window_size {window_size!r} must be an int >= 2 (a rate needs two points)")
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.window_size = window_size
        self.separator = separator
        self._throughputs: dict[str, Throughput] = {}
        self._t0s: dict[str, float] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._warned_flops = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._warned_flops = False

    def _start(self, stage: str, trainer: Any) -> None:
        throughput = Throughput(trainer.world_size, self.window_size, self.separator)
        self._throughputs[stage] = throughput
        self._counts[stage] = {"batches": 0, "samples": 0, "lengths": 0}
        self._t0s[stage] = time.perf_counter()

    def _count(self, stage: str, batch: Any) -> None:
        counts = self._counts[stage]
        counts["batches"] += 1
        counts["samples"] += self.batch_size_fn(batch)
        if self.length_fn is not None:
            counts["lengths"] += self.length_fn(batch)

    @torch.inference_mode()
    def _update(self, stage: str, trainer: Any, pl_module: Any) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # the step's kernels must be done before the clock is read
        elapsed = time.perf_counter() - self._t0s[stage]
        counts = self._counts[stage]
        flops = getattr(pl_module, "flops_per_batch", None)
        if flops is None and not self._warned_flops:
            self._warned_flops = True
            warnings.warn(
                f"ThroughputMonitor computes FLOPs only when {type(pl_module).__name__} has a `flops_per_batch` "
                "attribute or property",
                TrainerWarning,
                stacklevel=2,
            )
        self._throughputs[stage].update(
            time=elapsed,
            batches=counts["batches"],
            samples=counts["samples"],
            lengths=None if self.length_fn is None else counts["lengths"],
            flops=flops,
        )

    def _compute(self, stage: str, trainer: Any, step: int | None) -> None:
        if not trainer.fit_loop.should_log():
            return
        computed = self._throughputs[stage].compute()
        metrics = {f"{stage}{self.separator}{name}": float(value) for name, value in computed.items()}
        values = {name: torch.tensor(value) for name, value in metrics.items()}
        trainer.run.metrics.publish(values, to_callbacks=False, to_logged=True)
        if step is None:
            metrics.setdefault("epoch", trainer.current_epoch)
            step = trainer.fit_loop.batches_that_stepped
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
            logger.save()

    # training

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("train", trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._count("train", batch)
        # measured at optimizer steps, so each measurement includes a whole step
        if pl_module.automatic_optimization and not (
            (batch_idx + 1) % trainer.accumulate_grad_batches == 0 or trainer.is_last_batch
        ):
            return
        self._update("train", trainer, pl_module)
        self._compute("train", trainer, None)

    # evaluation and prediction

    def _eval_batch_end(self, stage: str, trainer: Any, pl_module: Any, batch: Any) -> None:
        self._count(stage, batch)
        self._update(stage, trainer, pl_module)
        self._compute(stage, trainer, self._counts[stage]["batches"])

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._start("validate", trainer)

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking:
            self._eval_batch_end("validate", trainer, pl_module, batch)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or "train" not in self._t0s or trainer.state.fn != "fit":
            return
        # the training clock skips the time spent validating
        self._t0s["train"] += time.perf_counter() - self._t0s["validate"]

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("test", trainer)

    def on_test_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end("test", trainer, pl_module, batch)

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self._start("predict", trainer)

    def on_predict_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end("predict", trainer, pl_module, batch)
