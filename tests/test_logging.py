"""`self.log` as Lightning 2.6 defines it, and the logging step it uses.

Per-hook defaults and refusals, `_step`/`_epoch` names, epoch reductions and batch sizes, the three destinations
(`logged_metrics`, `callback_metrics`, `progress_bar_metrics`), logger calls and `log_every_n_steps`, several eval
loaders, torchmetrics objects, and the results validate/test return and print.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest
import torch
from conftest import MemoryLogger, TinyModel, make_loader, quiet_trainer
from torch.utils.data import DataLoader
from torchmetrics.classification import BinaryAccuracy

import statemachine as L
from stages.exceptions import TrainerWarning


def batches(n: int, batch_size: int = 1) -> DataLoader:
    return make_loader(n=n * batch_size, batch_size=batch_size)


class LogModel(TinyModel):
    """Runs `log_in[hook](module, batch_idx)` from the named hooks; everything else is TinyModel without logging."""

    def __init__(self, **log_in: Callable[..., None]) -> None:
        super().__init__()
        self.log_in = log_in

    def _run(self, hook: str, *args: Any) -> None:
        if hook in self.log_in:
            self.log_in[hook](self, *args)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._run("training_step", batch, batch_idx)
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._run("validation_step", batch, batch_idx, dataloader_idx)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._run("test_step", batch, batch_idx, dataloader_idx)

    def setup(self, stage: str) -> None:
        self._run("setup")

    def on_fit_start(self) -> None:
        self._run("on_fit_start")

    def on_train_epoch_end(self) -> None:
        self._run("on_train_epoch_end")

    def on_train_end(self) -> None:
        self._run("on_train_end")

    def on_validation_epoch_end(self) -> None:
        self._run("on_validation_epoch_end")


def trainer_with(tmp_path: Any, logger: L.Logger | bool = False, **flags: Any) -> L.Trainer:
    options: dict[str, Any] = {"num_sanity_val_steps": 0, "log_every_n_steps": 1}
    options.update(flags)
    return quiet_trainer(tmp_path, logger=logger, **options)


# ---- per-hook defaults and refusals ------------------------------------------------------------------------


def test_training_step_logs_on_step_only_by_default(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(training_step=lambda m, b, i: m.log("x", float(i)))
    trainer = trainer_with(tmp_path, logger)
    trainer.fit(model, batches(3))
    assert logger.values_of("x") == [0.0, 1.0, 2.0]
    assert not any(key.startswith("x_") for _, metrics in logger.calls for key in metrics)
    assert set(trainer.logged_metrics) == {"x"}
    assert trainer.callback_metrics["x"].item() == 2.0  # the last step value, not an epoch mean


def test_validation_step_logs_on_epoch_only_by_default(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(validation_step=lambda m, b, i, d: m.log("v", float(i)))
    trainer = trainer_with(tmp_path, logger, max_epochs=2)
    trainer.fit(model, batches(2), batches(3))
    assert logger.values_of("v") == [1.0, 1.0]  # one epoch mean (0+1+2)/3 per validation
    assert trainer.callback_metrics["v"].item() == 1.0


def test_epoch_hooks_allow_only_on_epoch(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(on_train_epoch_end=lambda m: m.log("e", 5.0))
    trainer = trainer_with(tmp_path, logger)
    trainer.fit(model, batches(2))
    assert logger.values_of("e") == [5.0]
    assert trainer.callback_metrics["e"].item() == 5.0
    for bad in ({"on_step": True}, {"on_epoch": False}):
        model = LogModel(on_train_epoch_end=lambda m, bad=bad: m.log("e", 5.0, **bad))
        with pytest.raises(L.MisconfigurationException, match="on_train_epoch_end"):
            trainer_with(tmp_path).fit(model, batches(2))


@pytest.mark.parametrize("hook", ["on_fit_start", "setup", "on_train_end"])
def test_logging_from_hooks_without_a_loop_is_refused(tmp_path: Any, hook: str) -> None:
    model = LogModel(**{hook: lambda m: m.log("x", 1.0)})
    with pytest.raises(L.MisconfigurationException, match=hook):
        trainer_with(tmp_path).fit(model, batches(2))


def test_on_step_and_on_epoch_give_step_and_epoch_names(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(training_step=lambda m, b, i: m.log("x", float(i + 1), on_step=True, on_epoch=True))
    trainer = trainer_with(tmp_path, logger)
    trainer.fit(model, batches(4))
    assert logger.values_of("x_step") == [1.0, 2.0, 3.0, 4.0]
    assert logger.values_of("x_epoch") == [2.5]
    assert "x" not in trainer.logged_metrics
    assert trainer.logged_metrics["x_step"].item() == 4.0
    assert trainer.logged_metrics["x_epoch"].item() == 2.5
    callback = trainer.callback_metrics
    assert (callback["x_step"].item(), callback["x_epoch"].item(), callback["x"].item()) == (4.0, 2.5, 2.5)


# ---- epoch reductions ---------------------------------------------------------------------------------------------


def test_epoch_mean_is_weighted_by_an_explicit_batch_size(tmp_path: Any) -> None:
    sizes = [1, 3]
    model = LogModel(
        training_step=lambda m, b, i: m.log("w", float(i + 1), on_step=False, on_epoch=True, batch_size=sizes[i])
    )
    trainer = trainer_with(tmp_path)
    trainer.fit(model, batches(2))
    assert trainer.callback_metrics["w"].item() == pytest.approx((1 * 1 + 2 * 3) / 4)


def test_epoch_mean_is_weighted_by_the_batch_size_found_in_the_batch(tmp_path: Any) -> None:
    loader = make_loader(n=5, batch_size=2)  # batches of 2, 2 and 1
    model = LogModel(validation_step=lambda m, b, i, d: m.log("v", float(i)))
    trainer = trainer_with(tmp_path)
    (result,) = trainer.validate(model, loader, verbose=False)
    assert result["v"] == pytest.approx((0 * 2 + 1 * 2 + 2 * 1) / 5)


@pytest.mark.parametrize(
    ("reduce_fx", "expected"),
    [
        ("mean", 2.0),
        ("sum", 6.0),
        ("max", 3.0),
        ("min", 1.0),
        (torch.max, 3.0),
        (torch.sum, 6.0),
        (torch.min, 1.0),
        (max, 3.0),  # Python's own, as Lightning takes them
        (sum, 6.0),
        (min, 1.0),
    ],
)
def test_reduce_fx(tmp_path: Any, reduce_fx: Any, expected: float) -> None:
    values = [2.0, 3.0, 1.0]
    model = LogModel(validation_step=lambda m, b, i, d: m.log("r", values[i], reduce_fx=reduce_fx))
    (result,) = trainer_with(tmp_path).validate(model, batches(3), verbose=False)
    assert result["r"] == pytest.approx(expected)


def test_unknown_reduce_fx_is_refused(tmp_path: Any) -> None:
    model = LogModel(validation_step=lambda m, b, i, d: m.log("r", 1.0, reduce_fx="median"))
    with pytest.raises(L.MisconfigurationException, match="reduce_fx"):
        trainer_with(tmp_path).validate(model, batches(1), verbose=False)


@pytest.mark.parametrize(
    "value", [3, 3.0, torch.tensor(3.0), torch.tensor(3), torch.tensor([3.0]), torch.tensor([[3.0]])]
)
def test_tensors_and_python_numbers(tmp_path: Any, value: Any) -> None:
    model = LogModel(validation_step=lambda m, b, i, d: m.log("n", value))
    integral = isinstance(value, torch.Tensor) and not value.is_floating_point()
    with pytest.warns(TrainerWarning, match="needs to be floating") if integral else nullcontext():
        (result,) = trainer_with(tmp_path).validate(model, batches(2), verbose=False)
    assert result == {"n": 3.0}
    assert isinstance(result["n"], float)
    with pytest.warns(TrainerWarning, match="needs to be floating") if integral else nullcontext():
        assert trainer_callback_dtype(tmp_path, value).is_floating_point()


def trainer_callback_dtype(tmp_path: Any, value: Any) -> torch.Tensor:
    model = LogModel(validation_step=lambda m, b, i, d: m.log("n", value))
    trainer = trainer_with(tmp_path)
    trainer.validate(model, batches(1), verbose=False)
    return trainer.callback_metrics["n"]


def test_logged_tensors_are_detached(tmp_path: Any) -> None:
    def log_loss(m: Any, b: Any, i: int) -> None:
        m.log("loss", torch.nn.functional.cross_entropy(m(b[0]), b[1]), on_epoch=True)

    trainer = trainer_with(tmp_path)
    trainer.fit(LogModel(training_step=log_loss), batches(2))
    assert all(not value.requires_grad for value in trainer.callback_metrics.values())


@pytest.mark.parametrize("value", [torch.tensor([1.0, 2.0]), torch.zeros(2, 2)])
def test_a_non_scalar_tensor_is_refused(tmp_path: Any, value: torch.Tensor) -> None:
    model = LogModel(training_step=lambda m, b, i: m.log("bad", value))
    with pytest.raises(ValueError, match="bad"):
        trainer_with(tmp_path).fit(model, batches(1))


def test_a_non_number_is_refused(tmp_path: Any) -> None:
    model = LogModel(training_step=lambda m, b, i: m.log("word", "hello"))
    with pytest.raises(ValueError, match="word"):
        trainer_with(tmp_path).fit(model, batches(1))


# ---- destinations ----------------------------------------------------------------------------------------------


def test_prog_bar_metrics_are_floats(tmp_path: Any) -> None:
    def log(m: Any, b: Any, i: int) -> None:
        m.log("p", torch.tensor(float(i)), prog_bar=True)
        m.log("pe", float(i), prog_bar=True, on_step=True, on_epoch=True)
        m.log("hidden", 1.0)

    trainer = trainer_with(tmp_path)
    trainer.fit(LogModel(training_step=log), batches(3))
    bar = trainer.progress_bar_metrics
    assert bar == {"p": 2.0, "pe_step": 2.0, "pe_epoch": 1.0}
    assert all(type(value) is float for value in bar.values())


def test_logger_false_keeps_a_value_out_of_the_loggers_only(tmp_path: Any) -> None:
    logger = MemoryLogger()

    def log(m: Any, b: Any, i: int) -> None:
        m.log("private", 7.0, logger=False)
        m.log("public", 8.0)

    trainer = trainer_with(tmp_path, logger)
    trainer.fit(LogModel(training_step=log), batches(2))
    assert "private" not in trainer.logged_metrics
    assert logger.values_of("private") == []
    assert trainer.callback_metrics["private"].item() == 7.0
    assert logger.values_of("public") == [8.0, 8.0]


def test_log_every_n_steps_and_the_epoch_key(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(training_step=lambda m, b, i: m.log("x", float(i), on_step=True, on_epoch=True))
    trainer = trainer_with(tmp_path, logger, log_every_n_steps=2, max_epochs=2)
    trainer.fit(model, batches(6))
    # step metrics when (batches that stepped + 1) % 2 == 0, at the logging step
    assert logger.steps_of("x_step") == [1, 3, 5, 7, 9, 11]
    assert logger.values_of("x_step") == [1.0, 3.0, 5.0, 1.0, 3.0, 5.0]
    # every logger call carries the current epoch
    assert all("epoch" in metrics for _, metrics in logger.calls)
    assert [metrics["epoch"] for _, metrics in logger.calls if "x_step" in metrics] == [0, 0, 0, 1, 1, 1]
    assert [metrics["epoch"] for _, metrics in logger.calls if "x_epoch" in metrics] == [0, 1]


def test_epoch_metrics_are_logged_at_the_last_batch_s_step(tmp_path: Any) -> None:
    """Reference 3.1 step 4.6: epoch metrics go out at logging step - 1, the step of the epoch's last batch."""
    logger = MemoryLogger()
    model = LogModel(training_step=lambda m, b, i: m.log("x", float(i), on_step=True, on_epoch=True))
    trainer = trainer_with(tmp_path, logger, max_epochs=2)
    trainer.fit(model, batches(3))
    assert logger.steps_of("x_step") == [0, 1, 2, 3, 4, 5]
    assert logger.steps_of("x_epoch") == [2, 5]


def test_validation_epoch_metrics_are_logged_at_the_current_logging_step(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(validation_step=lambda m, b, i, d: m.log("v", 1.0))
    trainer = trainer_with(tmp_path, logger, max_epochs=2, val_check_interval=0.5)
    trainer.fit(model, batches(4), batches(2))
    # validation runs in the post-batch phase, before the logging step advances past that batch
    assert logger.steps_of("v") == [1, 3, 5, 7]
    assert [metrics["epoch"] for _, metrics in logger.calls if "v" in metrics] == [0, 0, 1, 1]


def test_log_every_n_steps_zero_sends_no_step_metrics(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(training_step=lambda m, b, i: m.log("x", float(i), on_step=True, on_epoch=True))
    trainer = trainer_with(tmp_path, logger, log_every_n_steps=0)
    trainer.fit(model, batches(3))
    assert logger.steps_of("x_step") == []
    assert logger.values_of("x_epoch") == [1.0]


def test_no_step_metrics_from_the_sanity_check(tmp_path: Any) -> None:
    logger = MemoryLogger()
    model = LogModel(validation_step=lambda m, b, i, d: m.log("v", 1.0, on_step=True))
    trainer = trainer_with(tmp_path, logger, num_sanity_val_steps=2, limit_train_batches=1)
    trainer.fit(model, batches(1), batches(2))
    assert len(logger.values_of("v_step")) == 2  # the real validation's two batches only
    assert logger.values_of("v_epoch") == [1.0]


# ---- several eval loaders ----------------------------------------------------------------------------------------


def test_dataloader_idx_is_appended_with_several_loaders(tmp_path: Any) -> None:
    logger = MemoryLogger()

    def log(m: Any, b: Any, i: int, d: int) -> None:
        m.log("v", float(d * 10 + i))

    model = LogModel(validation_step=log, on_validation_epoch_end=lambda m: m.log("shared", 1.0))
    trainer = trainer_with(tmp_path, logger)
    results = trainer.validate(model, [batches(2), batches(3)], verbose=False)
    assert results == [
        {"v/dataloader_idx_0": 0.5, "shared": 1.0},
        {"v/dataloader_idx_1": 11.0, "shared": 1.0},
    ]
    assert trainer.callback_metrics["v/dataloader_idx_1"].item() == 11.0
    assert logger.values_of("v/dataloader_idx_0") == [0.5]


def test_add_dataloader_idx_false_keeps_the_names(tmp_path: Any) -> None:
    def log(m: Any, b: Any, i: int, d: int) -> None:
        m.log(f"v{d}", float(d), add_dataloader_idx=False)

    results = trainer_with(tmp_path).validate(LogModel(validation_step=log), [batches(1), batches(1)], verbose=False)
    assert results == [{"v0": 0.0}, {"v1": 1.0}]


def test_one_loader_gets_no_suffix(tmp_path: Any) -> None:
    model = LogModel(test_step=lambda m, b, i, d: m.log("t", 2.0))
    assert trainer_with(tmp_path).test(model, [batches(2)], verbose=False) == [{"t": 2.0}]


# ---- torchmetrics ----------------------------------------------------------------------------------------------------


class MetricModel(TinyModel):
    """Logs a BinaryAccuracy over fixed predictions, so the expected values are known."""

    def __init__(self, predictions: list[list[int]], targets: list[list[int]]) -> None:
        super().__init__()
        self.accuracy = BinaryAccuracy()
        self.predictions = predictions
        self.targets = targets
        self.step_values: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        predictions = torch.tensor(self.predictions[batch_idx])
        targets = torch.tensor(self.targets[batch_idx])
        self.step_values.append(float(self.accuracy(predictions, targets)))
        self.log("acc", self.accuracy, on_step=True, on_epoch=True)
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)


def test_torchmetrics_step_value_is_forward_and_epoch_value_is_compute(tmp_path: Any) -> None:
    logger = MemoryLogger()
    # batch 0: 1 of 2 right; batch 1: 4 of 4 right -> epoch accuracy 5/6 (not the mean of 0.5 and 1.0)
    model = MetricModel([[1, 0], [1, 1, 0, 0]], [[1, 1], [1, 1, 0, 0]])
    trainer = trainer_with(tmp_path, logger, max_epochs=2)
    trainer.fit(model, batches(2))
    assert logger.values_of("acc_step") == [0.5, 1.0, 0.5, 1.0]
    # compute over each epoch; the state was reset in between (else epoch 2 would count 10 of 12 the same way,
    # so check the update count too)
    assert logger.values_of("acc_epoch") == [pytest.approx(5 / 6), pytest.approx(5 / 6)]
    assert model.step_values == [0.5, 1.0, 0.5, 1.0]
    assert model.accuracy.update_count == 0


def test_torchmetrics_state_is_reset_between_epochs(tmp_path: Any) -> None:
    class Varying(MetricModel):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            index = self.current_epoch * 2 + batch_idx
            predictions, targets = torch.tensor(self.predictions[index]), torch.tensor(self.targets[index])
            self.accuracy(predictions, targets)
            self.log("acc", self.accuracy, on_epoch=True, on_step=False)
            return TinyModel.training_step(self, batch, batch_idx)

    # epoch 0: 2 of 2 right; epoch 1: 0 of 2 right -> 1.0 then 0.0 (0.5 if epoch 0's state leaked)
    model = Varying([[1], [0], [1], [0]], [[1], [0], [0], [1]])
    logger = MemoryLogger()
    trainer_with(tmp_path, logger, max_epochs=2).fit(model, batches(2))
    assert logger.values_of("acc") == [1.0, 0.0]


def test_torchmetrics_in_validation(tmp_path: Any) -> None:
    class ValMetric(TinyModel):
        def __init__(self) -> None:
            super().__init__()
            self.accuracy = BinaryAccuracy()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.accuracy.update(self(x).argmax(1), y)
            self.log("val_acc", self.accuracy)

    model = ValMetric()
    loader = batches(3, batch_size=4)
    (result,) = trainer_with(tmp_path).validate(model, loader, verbose=False)
    with torch.no_grad():
        expected = torch.cat([(model(x).argmax(1) == y).float() for x, y in loader]).mean().item()
    assert result["val_acc"] == pytest.approx(expected)


# ---- results and what callbacks see ----------------------------------------------------------------------------------


def test_validate_and_test_return_one_dict_per_loader_and_print_a_table(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    model = LogModel(
        validation_step=lambda m, b, i, d: m.log("val_metric", 0.25),
        test_step=lambda m, b, i, d: m.log("test_metric", 0.75),
    )
    trainer = trainer_with(tmp_path)
    assert trainer.validate(model, batches(2)) == [{"val_metric": 0.25}]
    out = capsys.readouterr().out
    assert "Validate metric" in out and "DataLoader 0" in out
    assert "val_metric" in out and "0.25" in out
    assert trainer.test(model, [batches(1), batches(1)]) == [
        {"test_metric/dataloader_idx_0": 0.75},
        {"test_metric/dataloader_idx_1": 0.75},
    ]
    out = capsys.readouterr().out
    assert "Test metric" in out and "DataLoader 1" in out and "0.75" in out
    trainer.test(model, batches(1), verbose=False)
    assert capsys.readouterr().out == ""


def test_fit_prints_no_results_table(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    model = LogModel(validation_step=lambda m, b, i, d: m.log("val_metric", 0.25))
    trainer_with(tmp_path).fit(model, batches(1), batches(1))
    assert "Validate metric" not in capsys.readouterr().out


class MetricsSeen(L.Callback):
    def __init__(self) -> None:
        self.at_train_epoch_end: dict[str, float] = {}
        self.at_validation_end: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.at_train_epoch_end = {k: v.item() for k, v in trainer.callback_metrics.items()}

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.at_validation_end.append({k: v.item() for k, v in trainer.callback_metrics.items()})


def test_callbacks_see_the_epoch_mean_and_the_validation_results(tmp_path: Any) -> None:
    seen = MetricsSeen()

    def train_log(m: Any, b: Any, i: int) -> None:
        m.log("t", float(i + 1), on_step=False, on_epoch=True)

    def val_log(m: Any, b: Any, i: int, d: int) -> None:
        m.log("v", float(m.current_epoch * 10 + i))

    model = LogModel(training_step=train_log, validation_step=val_log)
    trainer = trainer_with(tmp_path, callbacks=[seen], max_epochs=2)
    trainer.fit(model, batches(3), batches(2))
    assert seen.at_train_epoch_end["t"] == 2.0  # (1 + 2 + 3) / 3 while the epoch is ending
    assert [metrics["v"] for metrics in seen.at_validation_end] == [0.5, 10.5]
    assert trainer.callback_metrics["t"].item() == 2.0
    assert trainer.callback_metrics["v"].item() == 10.5
