"""Profilers: `Trainer(profiler=...)` times the run's actions and reports them when the run ends."""

from __future__ import annotations

import json
import logging
import pstats
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from conftest import Boom, TinyModel, make_loader, quiet_trainer

import statemachine as L
from stages.hooks import HookRunner
from statemachine.profilers import (
    AdvancedProfiler,
    PassThroughProfiler,
    Profiler,
    PyTorchProfiler,
    SimpleProfiler,
)

TRAIN_BATCHES = 4  # make_loader(): 32 samples, batch 8


def _report_lines(text: str) -> dict[str, list[str]]:
    """The simple profiler's table as {action: [cells after the name]}."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_simple_profiler_writes_one_report_per_entry_point_into_the_log_dir(tmp_path: Path) -> None:
    loader = make_loader()
    trainer = quiet_trainer(
        tmp_path,
        logger=L.CSVLogger(tmp_path),
        profiler=SimpleProfiler(filename="perf"),
        max_epochs=2,
        log_every_n_steps=1,
    )
    trainer.fit(TinyModel(), loader, loader)
    trainer.test(TinyModel(), loader, verbose=False)

    log_dir = Path(trainer.log_dir)
    fit_report = (log_dir / "fit-perf.txt").read_text()
    test_report = (log_dir / "test-perf.txt").read_text()
    assert fit_report.startswith("FIT Profiler Report")
    assert test_report.startswith("TEST Profiler Report")

    fit = _report_lines(fit_report)
    # columns: mean, calls, total, percentage
    assert fit["[LightningModule]TinyModel.training_step"][1] == str(2 * TRAIN_BATCHES)
    assert fit["[LightningModule]TinyModel.optimizer_step"][1] == str(2 * TRAIN_BATCHES)
    assert fit["train_dataloader_next"][1] == str(2 * TRAIN_BATCHES)
    # sanity check (2 batches) + one validation per epoch (4 batches each)
    assert fit["[LightningModule]TinyModel.validation_step"][1] == str(2 + 2 * TRAIN_BATCHES)
    # the machine's own transitions and callbacks, from the history
    assert fit["[Transition]fit: idle -> fitting.setup"][1] == "1"
    assert fit["[Transition]val_check: fitting.training -> fitting.validating [val_batches_counted]"][1] == "2"
    assert fit["[Machine]configure_optimizers"][1] == "1"
    assert "test_step" not in fit_report

    test = _report_lines(test_report)
    assert test["[LightningModule]TinyModel.test_step"][1] == str(TRAIN_BATCHES)
    assert test["test_dataloader_next"][1] == str(TRAIN_BATCHES)
    assert test["[Transition]test: finished -> testing"][1] == "1"
    assert "training_step" not in test_report  # each report covers its own run


def test_simple_profiler_without_filename_logs_the_summary(tmp_path: Path, caplog: Any) -> None:
    loader = make_loader()
    with caplog.at_level(logging.INFO):
        quiet_trainer(tmp_path, profiler="simple").validate(TinyModel(), loader, verbose=False)
    printed = "\n".join(record.getMessage() for record in caplog.records)
    assert "VALIDATE Profiler Report" in printed
    assert "[LightningModule]TinyModel.validation_step" in printed
    assert not list(tmp_path.glob("*.txt"))


def test_simple_profiler_not_extended_has_no_call_counts(tmp_path: Path) -> None:
    profiler = SimpleProfiler(dirpath=tmp_path, filename="short", extended=False)
    quiet_trainer(tmp_path, profiler=profiler).fit(TinyModel(), make_loader())
    rows = _report_lines((tmp_path / "fit-short.txt").read_text())
    assert rows["Action"] == ["Mean duration (s)", "Total time (s)"]
    assert "Total" not in rows


def test_report_goes_to_an_fsspec_url() -> None:
    profiler = SimpleProfiler(dirpath="memory://profiles/run", filename="perf")
    quiet_trainer("memory://unused", profiler=profiler).fit(TinyModel(), make_loader())
    with fsspec.open("memory://profiles/run/fit-perf.txt", "r") as stream:
        assert "[LightningModule]TinyModel.training_step" in stream.read()


def test_advanced_profiler_reports_cprofile_stats_per_action(tmp_path: Path) -> None:
    profiler = AdvancedProfiler(filename="adv", dump_stats=True)
    trainer = quiet_trainer(tmp_path, profiler=profiler)
    trainer.fit(TinyModel(), make_loader())
    report = (tmp_path / "fit-adv.txt").read_text()
    assert "Profile stats for: [LightningModule]TinyModel.training_step" in report
    assert "Profile stats for: train_dataloader_next" in report
    # the step's report holds the cross-entropy the module computes
    step_section = report.split("Profile stats for: [LightningModule]TinyModel.training_step")[1]
    step_section = step_section.split("Profile stats for:")[0]
    assert "cross_entropy" in step_section
    dumped = tmp_path / "fit-adv-LightningModule_TinyModel.training_step.prof"
    stats = pstats.Stats(str(dumped))
    assert any(name == "cross_entropy" for (_, _, name) in stats.stats)


def test_pytorch_profiler_writes_a_chrome_trace_with_the_trainer_actions(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, profiler=PyTorchProfiler(filename="torch", row_limit=5))
    trainer.fit(TinyModel(), make_loader())
    report = (tmp_path / "fit-torch.txt").read_text()
    assert report.startswith("FIT Profiler Report")
    assert "CPU total" in report
    trace = json.loads((tmp_path / "fit-torch.0.pt.trace.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "[LightningModule]TinyModel.training_step" in names
    assert "train_dataloader_next" in names
    assert "[module]layer: Linear" in names


def test_pytorch_profiler_with_a_schedule_hands_traces_to_on_trace_ready(tmp_path: Path) -> None:
    ready: list[int] = []
    profiler = PyTorchProfiler(
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=1),
        on_trace_ready=lambda prof: ready.append(prof.step_num),
        acc_events=True,
    )
    quiet_trainer(tmp_path, profiler=profiler).fit(TinyModel(), make_loader())
    assert ready == [3]  # steps 0 wait, 1 warm-up, 2 recorded: ready once step 3 begins
    assert not list(tmp_path.glob("*.pt.trace.json"))


def test_pytorch_profiler_refuses_unknown_torch_arguments() -> None:
    with pytest.raises(ValueError, match="record_shape"):
        PyTorchProfiler(record_shape=True)


@pytest.mark.parametrize(
    ("name", "kind"), [("simple", SimpleProfiler), ("Advanced", AdvancedProfiler), ("pytorch", PyTorchProfiler)]
)
def test_profiler_names(tmp_path: Path, name: str, kind: type) -> None:
    assert type(quiet_trainer(tmp_path, profiler=name).profiler) is kind


def test_no_profiler_keeps_the_plain_hook_runner(tmp_path: Path) -> None:
    seen: list[type] = []

    class RunnerProbe(L.Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            seen.append(type(trainer.run.hooks))

    trainer = quiet_trainer(tmp_path, callbacks=[RunnerProbe()], max_epochs=1, limit_train_batches=1)
    assert isinstance(trainer.profiler, PassThroughProfiler)
    trainer.fit(TinyModel(), make_loader())
    assert seen == [HookRunner]  # nothing timed per batch


def test_bad_profiler_values_are_refused(tmp_path: Path) -> None:
    with pytest.raises(L.MisconfigurationException, match=r"profiler='xla'.*'simple', 'advanced', 'pytorch'"):
        L.Trainer(profiler="xla")
    with pytest.raises(
        L.MisconfigurationException,
        match=r"`Trainer\(barebones=True, profiler='simple'\)` was passed. Profiling can impact raw speed",
    ):
        L.Trainer(profiler="simple", barebones=True)


class Recording(Profiler):
    """A user's own profiler: only start, stop and summary."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: list[tuple[str, str]] = []

    def start(self, action_name: str) -> None:
        self.events.append(("start", action_name))

    def stop(self, action_name: str) -> None:
        self.events.append(("stop", action_name))

    def summary(self) -> str:
        return f"{len(self.events)} events"


def test_a_custom_profiler_sees_balanced_actions_and_its_summary_is_written(tmp_path: Path) -> None:
    profiler = Recording(filename="mine")
    quiet_trainer(tmp_path, profiler=profiler).predict(TinyModel(), make_loader())
    started = [name for kind, name in profiler.events if kind == "start"]
    stopped = [name for kind, name in profiler.events if kind == "stop"]
    assert sorted(started) == sorted(stopped)
    assert started.count("[LightningModule]TinyModel.predict_step") == TRAIN_BATCHES
    assert started.count("predict_dataloader_next") == TRAIN_BATCHES
    assert (tmp_path / "predict-mine.txt").read_text().strip() == f"{len(profiler.events)} events"


def test_a_failed_run_writes_no_report_and_stops_the_torch_profiler(tmp_path: Path) -> None:
    profiler = PyTorchProfiler(filename="torch")
    trainer = quiet_trainer(tmp_path, profiler=profiler)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    assert not (tmp_path / "fit-torch.txt").exists()
    assert profiler.profiler is None
    with torch.profiler.profile() as fresh:  # nothing is left recording
        torch.ones(1).add_(1)
    assert fresh.key_averages()
