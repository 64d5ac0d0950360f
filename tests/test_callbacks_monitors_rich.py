"""ThroughputMonitor, DeviceStatsMonitor, RichProgressBar and RichModelSummary through the real Trainer."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest
import torch
from conftest import MemoryLogger, TinyModel, make_loader, quiet_trainer

import statemachine as L
from stages.exceptions import MisconfigurationException


class CountedModel(TinyModel):
    flops_per_batch = 1000


def _batch_size(batch: Any) -> int:
    return batch[0].shape[0]


def _with_logger(tmp_path: Any, *callbacks: L.Callback, **options: Any) -> tuple[L.Trainer, MemoryLogger]:
    logger = MemoryLogger()
    trainer = quiet_trainer(tmp_path, logger=logger, log_every_n_steps=1, callbacks=list(callbacks), **options)
    return trainer, logger


# ---- ThroughputMonitor --------------------------------------------------------------------------------------


def test_throughput_counts_and_rates_of_training(tmp_path: Any) -> None:
    monitor = L.ThroughputMonitor(batch_size_fn=_batch_size, window_size=2)
    trainer, logger = _with_logger(tmp_path, monitor)
    trainer.fit(CountedModel(), make_loader())  # 4 batches of 8
    assert [v for _, v in logger.series("train/batches")] == [1, 2, 3, 4]
    assert [v for _, v in logger.series("train/samples")] == [8, 16, 24, 32]
    assert [step for step, _ in logger.series("train/samples")] == [0, 1, 2, 3]
    times = [v for _, v in logger.series("train/time")]
    assert times == sorted(times) and times[0] > 0
    # rates appear once the window of 2 updates is full
    first, *rest = [metrics for _, metrics in logger.calls if "train/batches" in metrics]
    assert "train/device/batches_per_sec" not in first
    for metrics in rest:
        assert metrics["train/device/samples_per_sec"] == pytest.approx(8 * metrics["train/device/batches_per_sec"])
        assert metrics["train/device/flops_per_sec"] == pytest.approx(1000 * metrics["train/device/batches_per_sec"])
        assert metrics["epoch"] == 0
    assert trainer.logged_metrics["train/samples"].item() == 32


def test_throughput_lengths_and_accumulation(tmp_path: Any) -> None:
    monitor = L.ThroughputMonitor(batch_size_fn=_batch_size, length_fn=lambda batch: 3 * _batch_size(batch))
    trainer, logger = _with_logger(tmp_path, monitor, accumulate_grad_batches=2)
    trainer.fit(CountedModel(), make_loader())
    # measured at the two optimizer steps only, counting every batch
    assert [v for _, v in logger.series("train/batches")] == [2, 4]
    assert [v for _, v in logger.series("train/lengths")] == [48, 96]


def test_throughput_of_validation_test_and_predict(tmp_path: Any) -> None:
    monitor = L.ThroughputMonitor(batch_size_fn=_batch_size, window_size=2)
    trainer, logger = _with_logger(tmp_path, monitor)
    trainer.fit(CountedModel(), make_loader(), make_loader(n=16))
    assert [v for _, v in logger.series("validate/samples")] == [8, 16]  # the sanity check is not measured
    trainer.test(CountedModel(), make_loader(n=8))
    assert [v for _, v in logger.series("test/batches")] == [1]
    trainer.predict(CountedModel(), make_loader(n=24))
    assert [v for _, v in logger.series("predict/samples")] == [8, 16, 24]
    assert "predict/device/samples_per_sec" in logger.names()


def test_throughput_warns_once_without_flops_and_validates_arguments(tmp_path: Any) -> None:
    trainer, logger = _with_logger(tmp_path, L.ThroughputMonitor(batch_size_fn=_batch_size, window_size=2))
    with pytest.warns(UserWarning, match="flops_per_batch") as caught:
        trainer.fit(TinyModel(), make_loader())
    assert len([w for w in caught if "flops_per_batch" in str(w.message)]) == 1
    assert not any("flops" in name for name in logger.names())
    with pytest.raises(ValueError, match="window_size"):
        L.ThroughputMonitor(batch_size_fn=_batch_size, window_size=1)
    with pytest.raises(TypeError, match="batch_size_fn"):
        L.ThroughputMonitor(batch_size_fn=8)  # type: ignore[arg-type]


# ---- DeviceStatsMonitor -------------------------------------------------------------------------------------


def test_device_stats_on_cpu_log_psutil_percentages(tmp_path: Any) -> None:
    trainer, logger = _with_logger(tmp_path, L.DeviceStatsMonitor(), limit_train_batches=2)
    trainer.fit(TinyModel(), make_loader(), make_loader())
    for hook in ("on_train_batch_start", "on_train_batch_end", "on_validation_batch_start", "on_validation_batch_end"):
        for stat in ("cpu_vm_percent", "cpu_percent", "cpu_swap_percent"):
            values = logger.series(f"DeviceStatsMonitor.{hook}/{stat}")
            assert values and all(0 <= value <= 100 for _, value in values)
    assert [step for step, _ in logger.series("DeviceStatsMonitor.on_train_batch_start/cpu_percent")] == [0, 1]


def test_device_stats_cpu_stats_false_logs_nothing_on_cpu(tmp_path: Any) -> None:
    trainer, logger = _with_logger(tmp_path, L.DeviceStatsMonitor(cpu_stats=False))
    trainer.fit(TinyModel(), make_loader())
    assert not any(name.startswith("DeviceStatsMonitor") for name in logger.names())


def test_device_stats_refusals(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MisconfigurationException, match="logger=False"):
        quiet_trainer(tmp_path, callbacks=[L.DeviceStatsMonitor()]).fit(TinyModel(), make_loader())
    monkeypatch.setitem(sys.modules, "psutil", None)
    trainer, _ = _with_logger(tmp_path, L.DeviceStatsMonitor())
    with pytest.raises(ModuleNotFoundError, match="psutil"):
        trainer.fit(TinyModel(), make_loader())


# ---- RichProgressBar / RichModelSummary ---------------------------------------------------------------------


class BarModel(TinyModel):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("shown_loss", loss, prog_bar=True)
        return loss


def _rich_bar() -> tuple[L.RichProgressBar, io.StringIO]:
    screen = io.StringIO()
    bar = L.RichProgressBar(console_kwargs={"file": screen, "force_terminal": True, "width": 160})
    return bar, screen


def test_rich_progress_bar_draws_epochs_and_metrics(tmp_path: Any) -> None:
    bar, screen = _rich_bar()
    trainer = quiet_trainer(tmp_path, max_epochs=2, enable_progress_bar=True, callbacks=[bar])
    assert trainer.progress_bar_callback is bar
    assert not any(isinstance(c, L.TQDMProgressBar) for c in trainer.callbacks)
    trainer.fit(BarModel(), make_loader(), make_loader())
    drawn = screen.getvalue()
    assert "Sanity Checking" in drawn and "Validation" in drawn
    assert "Epoch 0" in drawn and "Epoch 1" in drawn
    assert "4/4" in drawn
    assert "shown_loss:" in drawn
    trainer.test(BarModel(), make_loader())
    assert "Testing" in screen.getvalue()


def test_rich_progress_bar_refresh_rate_zero_draws_nothing(tmp_path: Any) -> None:
    screen = io.StringIO()
    bar = L.RichProgressBar(refresh_rate=0, console_kwargs={"file": screen, "force_terminal": True})
    quiet_trainer(tmp_path, enable_progress_bar=True, callbacks=[bar]).fit(BarModel(), make_loader())
    assert bar.is_disabled
    assert screen.getvalue() == ""


def test_rich_model_summary_prints_a_table(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    summary = L.RichModelSummary(max_depth=1)
    with caplog.at_level("INFO"):
        trainer = quiet_trainer(tmp_path, enable_model_summary=True, callbacks=[summary])
    assert "Trainer already configured with model summary callbacks: [<class " in caplog.text
    assert "RichModelSummary'>]. Skipping setting a default `ModelSummary` callback." in caplog.text
    assert not any(type(c) is L.ModelSummary for c in trainer.callbacks)
    trainer.fit(TinyModel(), make_loader())
    printed = capsys.readouterr().out
    for text in ("Name", "Type", "Params", "layer", "Linear", "10"):
        assert text in printed
    # Lightning's lines under the rich table: "label: value", FLOPs spelt so
    totals = [line.rstrip() for line in printed.splitlines()[-7:]]
    assert totals == [
        "Trainable params: 10",
        "Non-trainable params: 0",
        "Total params: 10",
        "Total estimated model params size (MB): 0.000",
        "Modules in train mode: 1",
        "Modules in eval mode: 0",
        "Total FLOPs: 0",
    ]
    with pytest.raises(TypeError, match="colour"):
        L.RichModelSummary(colour="red")


def test_rich_model_summary_shows_the_sizes_an_example_input_gives(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    model = TinyModel()
    model.example_input_array = torch.zeros(3, 4)
    quiet_trainer(tmp_path, enable_model_summary=True, callbacks=[L.RichModelSummary()]).fit(model, make_loader())
    printed = capsys.readouterr().out
    assert "In sizes" in printed and "[3, 4]" in printed and "[3, 2]" in printed


def test_rich_callbacks_are_refused_without_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ModuleNotFoundError, match=r"statemachine-trainer\[rich\]"):
        L.RichProgressBar()
    with pytest.raises(ModuleNotFoundError, match="RichModelSummary requires the `rich` package"):
        L.RichModelSummary()


def test_the_default_bar_and_summary_are_riches_when_rich_is_installed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    defaults = L.Trainer(default_root_dir=tmp_path, logger=False).callbacks
    assert [type(c) for c in defaults] == [L.RichProgressBar, L.RichModelSummary, L.ModelCheckpoint]
    monkeypatch.setitem(sys.modules, "rich", None)  # as if it were not installed
    defaults = L.Trainer(default_root_dir=tmp_path, logger=False).callbacks
    assert [type(c) for c in defaults] == [L.TQDMProgressBar, L.ModelSummary, L.ModelCheckpoint]
