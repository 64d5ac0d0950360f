"""DeviceStatsMonitor: log the training device's statistics around each batch."""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from stages.callbacks.callback import Callback
from stages.exceptions import MisconfigurationException

_PSUTIL_MISSING = "DeviceStatsMonitor needs `psutil` for CPU statistics: pip install psutil"


def psutil_available() -> bool:
    return importlib.util.find_spec("psutil") is not None


def get_cpu_stats() -> dict[str, float]:
    """Memory, CPU and swap use of the machine, in percent."""
    if not psutil_available():
        raise ModuleNotFoundError(_PSUTIL_MISSING)
    import psutil

    return {
        "cpu_vm_percent": psutil.virtual_memory().percent,
        "cpu_percent": psutil.cpu_percent(),
        "cpu_swap_percent": psutil.swap_memory().percent,
    }


def get_device_stats(device: torch.device) -> dict[str, float]:
    if device.type == "cpu":
        return get_cpu_stats()
    if device.type == "cuda":
        return dict(torch.cuda.memory_stats(device))
    raise MisconfigurationException(f"DeviceStatsMonitor has no statistics for device type {device.type!r}")


class DeviceStatsMonitor(Callback):
    """At the start and end of each training, validation and test batch (every `log_every_n_steps` steps),
    logs the device's statistics as `DeviceStatsMonitor.<hook>/<stat>`: on CPU the psutil percentages
    (`cpu_vm_percent`, `cpu_percent`, `cpu_swap_percent`), on CUDA `torch.cuda.memory_stats`. `cpu_stats=True`
    adds the CPU's to a GPU's, `cpu_stats=False` logs nothing on CPU; the default logs CPU statistics on CPU and
    requires psutil there."""

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats is not None and not isinstance(cpu_stats, bool):
            raise ValueError(f"cpu_stats {cpu_stats!r} must be True, False or None")
        self._cpu_stats = cpu_stats

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfigurationException("Cannot use DeviceStatsMonitor with Trainer(logger=False)")
        wants_cpu = self._cpu_stats or (self._cpu_stats is None and trainer.strategy.root_device.type == "cpu")
        if wants_cpu and not psutil_available():
            raise ModuleNotFoundError(_PSUTIL_MISSING)

    def _log_stats(self, trainer: Any, hook: str) -> None:
        if not trainer.fit_loop.should_log():
            return
        device = trainer.strategy.root_device
        if device.type == "cpu" and self._cpu_stats is False:
            return
        stats = get_device_stats(device)
        if self._cpu_stats and device.type != "cpu":
            stats.update(get_cpu_stats())
        for logger in trainer.loggers:
            separator = getattr(logger, "group_separator", "/")
            prefixed = {f"{type(self).__qualname__}.{hook}{separator}{name}": value for name, value in stats.items()}
            logger.log_metrics(prefixed, step=trainer.fit_loop.batches_that_stepped)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._log_stats(trainer, "on_train_batch_start")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log_stats(trainer, "on_train_batch_end")

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log_stats(trainer, "on_validation_batch_start")

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log_stats(trainer, "on_validation_batch_end")

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log_stats(trainer, "on_test_batch_start")

    def on_test_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log_stats(trainer, "on_test_batch_end")
