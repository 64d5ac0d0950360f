"""Shared fixtures: a tiny model and data that train in milliseconds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L


class TinyModel(L.LightningModule):
    """A linear classifier on 4 features; `fail_in` names a hook that raises `Boom` when called."""

    def __init__(self, fail_in: str | None = None, lr: float = 0.1):
        super().__init__()
        self.fail_in = fail_in
        self.layer = nn.Linear(4, 2)
        self.seen_exception: BaseException | None = None

    def _maybe_fail(self, hook: str) -> None:
        if self.fail_in == hook:
            raise Boom(hook)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._maybe_fail("training_step")
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._maybe_fail("validation_step")
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._maybe_fail("test_step")
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._maybe_fail("predict_step")
        return self(batch[0]).argmax(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        self._maybe_fail("configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Boom(RuntimeError):
    """The exception the tests inject into user hooks."""


class FailingAtStep(TinyModel):
    """A TinyModel whose init arguments are its hyperparameters; `training_step` raises `Boom` at `fail_at_step`."""

    def __init__(self, lr: float = 0.1, optimizer: dict[str, Any] | None = None, fail_at_step: int = -1) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.hparams.fail_at_step:
            raise Boom(f"failed at step {self.global_step}")
        return super().training_step(batch, batch_idx)


def make_loader(n: int = 32, batch_size: int = 8, seed: int = 0) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    y = (x[:, 0] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def quiet_trainer(tmp_path: Any, **kwargs: Any) -> L.Trainer:
    """A trainer without logger, progress bar, summary or checkpoints unless a test asks for them."""
    options: dict[str, Any] = {
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "default_root_dir": str(tmp_path),
        "max_epochs": 1,
    }
    options.update(kwargs)
    return L.Trainer(**options)


@pytest.fixture
def loader() -> DataLoader:
    return make_loader()


class MemoryLogger(L.Logger):
    """Keeps every `log_metrics` call (and every `log_hyperparams`) in memory."""

    def __init__(self) -> None:
        self.calls: list[tuple[int | None, dict[str, float]]] = []
        self.hparams: list[Any] = []

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any) -> None:
        self.hparams.append(params)

    def steps_of(self, key: str) -> list[int | None]:
        return [step for step, metrics in self.calls if key in metrics]

    def values_of(self, key: str) -> list[float]:
        return [metrics[key] for _, metrics in self.calls if key in metrics]

    def series(self, key: str) -> list[tuple[int | None, float]]:
        """(step, value) of every logging call that carried `key`."""
        return [(step, metrics[key]) for step, metrics in self.calls if key in metrics]

    def names(self) -> set[str]:
        return {name for _, metrics in self.calls for name in metrics}


class FakeClock:
    """A monotonic clock a test moves by hand (`now`)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def timer_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The Timer callback's clock, and only its own (the process's `time.monotonic` is left alone)."""
    clock = FakeClock()
    monkeypatch.setattr("stages.callbacks.timer.time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


REPO = Path(__file__).resolve().parents[1]

# Comet's environment and code logging take seconds per experiment and are not what the tests check.
COMET_QUICK: dict[str, Any] = {
    "log_code": False,
    "log_git_metadata": False,
    "log_git_patch": False,
    "log_env_details": False,
    "auto_output_logging": False,
    "display_summary_level": 0,
}


def run_example(name: str, *args: str) -> str:
    """Run `examples/<name>.py` with `args` in its own interpreter, the project's warnings as errors; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    warnings_as_errors = [
        "-W",
        "error::stages.exceptions.TrainerWarning",
        "-W",
        "error::devices.warning_types.DeviceWarning",
    ]
    command = [sys.executable, *warnings_as_errors, str(REPO / "examples" / f"{name}.py"), *args]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `mlflow server` on 127.0.0.1 with a sqlite store and proxied artifacts; its tracking URI."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [
        *(sys.executable, "-m", "mlflow", "server"),
        *("--backend-store-uri", f"sqlite:///{root / 'store.db'}"),
        *("--artifacts-destination", str(root / "artifacts")),
        *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
    ]
    log = open(root / "server.log", "wb")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    try:
        _wait_until_healthy(server, f"{uri}/health", root / "server.log")
        yield uri
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _wait_until_healthy(server: subprocess.Popen, url: str, log: Path, deadline_s: float = 120.0) -> None:
    """Polls the server's health endpoint: it answers once its store is created and its workers listen."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            # refused until the server listens; a refusal returns at once, so the poll waits a little between tries
            time.sleep(0.2)
    raise RuntimeError(f"mlflow server did not answer {url} within {deadline_s}s:\n{log.read_text()[-3000:]}")
