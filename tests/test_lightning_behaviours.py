"""Behaviours Lightning users rely on that are easy to get subtly wrong: hooks set on instances, step methods
without `batch_idx`, the stage seen by `on_exception`, grad mode of evaluation hooks, on-exception checkpoint
names, EarlyStopping's reason, and the errors and warnings Lightning gives for incomplete modules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import Boom, TinyModel, make_loader, quiet_trainer

import statemachine as L
from stages import hooks as hook_module
from stages.callbacks.early_stopping import EarlyStoppingReason
from stages.exceptions import MisconfigurationException

# ---- hooks set on instances -----------------------------------------------------------------------------


def test_a_hook_assigned_on_a_callback_instance_is_called(tmp_path: Path) -> None:
    calls: list[Any] = []
    callback = L.Callback()
    callback.on_fit_start = lambda trainer, module: calls.append("fit_start")  # type: ignore[method-assign]
    callback.on_train_batch_end = lambda trainer, module, outputs, batch, batch_idx: calls.append(batch_idx)  # type: ignore[method-assign]
    quiet_trainer(tmp_path, callbacks=[callback], limit_train_batches=3).fit(TinyModel(), make_loader())
    assert calls == ["fit_start", 0, 1, 2]


def test_a_callback_hook_set_to_none_on_the_instance_is_skipped(tmp_path: Path) -> None:
    class Counting(L.Callback):
        def __init__(self) -> None:
            self.batches = 0

        def on_train_batch_end(self, *args: Any) -> None:
            self.batches += 1

    switched_off, counting = Counting(), Counting()
    switched_off.on_train_batch_end = None  # type: ignore[assignment]
    quiet_trainer(tmp_path, callbacks=[switched_off, counting], limit_train_batches=2).fit(TinyModel(), make_loader())
    assert (switched_off.batches, counting.batches) == (0, 2)


def test_a_module_hook_assigned_on_the_instance_is_called_and_may_log(tmp_path: Path) -> None:
    model = TinyModel()
    model.on_train_epoch_end = lambda: model.log("set_on_instance", 7.0)  # type: ignore[method-assign]
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(model, make_loader())
    assert trainer.callback_metrics["set_on_instance"].item() == 7.0


def test_module_hooks_set_to_none_are_skipped(tmp_path: Path) -> None:
    model = TinyModel()
    model.on_train_epoch_end = None  # type: ignore[assignment]
    model.on_validation_model_eval = None  # type: ignore[assignment]
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, make_loader(), make_loader())
    assert trainer.global_step == 2


class ValLoaderRecorder(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.val_requests = 0

    def train_dataloader(self) -> Any:
        return make_loader()

    def val_dataloader(self) -> Any:
        self.val_requests += 1
        return make_loader()


def test_validation_step_set_to_none_switches_validation_off_with_a_warning(tmp_path: Path) -> None:
    model = ValLoaderRecorder()
    model.validation_step = None  # type: ignore[assignment]
    trainer = quiet_trainer(tmp_path, limit_train_batches=2, max_epochs=2)
    with pytest.warns(UserWarning, match="val_dataloader` but have no `validation_step`"):
        trainer.fit(model)
    assert model.val_requests == 0  # the loop is off: its loader is never requested
    assert trainer.global_step == 4 and "val_loss" not in trainer.callback_metrics


def test_a_val_loader_passed_without_validation_step_warns_and_is_skipped(tmp_path: Path) -> None:
    class NoValidationStep(TinyModel):
        validation_step = None  # type: ignore[assignment]

    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    with pytest.warns(UserWarning, match="Skipping val loop"):
        trainer.fit(NoValidationStep(), make_loader(), make_loader())
    assert trainer.global_step == 2 and "val_loss" not in trainer.callback_metrics


def test_test_step_or_predict_step_set_to_none_is_refused(tmp_path: Path) -> None:
    model = TinyModel()
    model.test_step = None  # type: ignore[assignment]
    model.predict_step = None  # type: ignore[assignment]
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(MisconfigurationException, match="test_step"):
        trainer.test(model, make_loader())
    with pytest.raises(MisconfigurationException, match="`predict_step` cannot be None"):
        trainer.predict(model, make_loader())
    assert trainer.state.status == L.TrainerStatus.INITIALIZING  # refused before anything ran


def test_predict_needs_predict_step_or_forward(tmp_path: Path) -> None:
    class NoForward(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

    with pytest.raises(MisconfigurationException, match="forward"):
        quiet_trainer(tmp_path).predict(NoForward(), make_loader())


# ---- what Lightning refuses or warns about instead of running silently -----------------------------------


def test_fit_without_training_step_is_an_error(tmp_path: Path) -> None:
    class NoTrainingStep(L.LightningModule):
        def configure_optimizers(self) -> Any:
            return None

    model = TinyModel()
    model.training_step = None  # type: ignore[assignment]
    for module in (NoTrainingStep(), model):
        with pytest.raises(MisconfigurationException, match="training_step"):
            quiet_trainer(tmp_path).fit(module, make_loader())


def test_configure_optimizers_returning_none_warns_and_runs_without_optimizer(tmp_path: Path) -> None:
    class NoOptimizer(TinyModel):
        def configure_optimizers(self) -> None:
            return None

    model = NoOptimizer()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = quiet_trainer(tmp_path, max_steps=3, max_epochs=5, limit_val_batches=0)
    with pytest.warns(UserWarning, match="returned `None`, this fit will run with no optimizer"):
        trainer.fit(model, make_loader())
    # the loop still steps (Lightning's stand-in optimizer counts), so max_steps ends the run
    assert trainer.global_step == 3
    assert len(trainer.optimizers) == 1 and not trainer.optimizers[0].param_groups[0]["params"][0].requires_grad
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ---- step methods without batch_idx ---------------------------------------------------------------------


class WithoutBatchIdx(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.steps[name] = self.steps.get(name, 0) + 1

    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        self._count("training_step")
        return super().training_step(batch, 0)

    def validation_step(self, batch: Any) -> None:  # type: ignore[override]
        self._count("validation_step")
        super().validation_step(batch, 0)

    def test_step(self, batch: Any) -> None:  # type: ignore[override]
        self._count("test_step")
        super().test_step(batch, 0)

    def predict_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        self._count("predict_step")
        return self(batch[0])


def test_step_methods_without_batch_idx_are_called_with_the_batch_only(tmp_path: Path) -> None:
    model = WithoutBatchIdx()
    trainer = quiet_trainer(tmp_path, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=0)
    trainer.fit(model, make_loader(), make_loader())
    trainer.test(model, make_loader())
    assert "test_acc" in trainer.callback_metrics
    predictions = trainer.predict(model, make_loader())
    assert model.steps == {"training_step": 3, "validation_step": 2, "test_step": 4, "predict_step": 4}
    assert len(predictions) == 4


def test_step_methods_taking_varargs_or_a_renamed_index_still_get_batch_idx(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Flexible(TinyModel):
        def training_step(self, batch: Any, *args: Any) -> torch.Tensor:  # type: ignore[override]
            seen.append(args)
            return super().training_step(batch, args[0])

        def validation_step(self, batch: Any, index: int) -> None:  # type: ignore[override]
            seen.append(("val", index))

    trainer = quiet_trainer(tmp_path, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0)
    trainer.fit(Flexible(), make_loader(), make_loader())
    assert seen == [(0,), (1,), ("val", 0)]


def test_the_signature_is_read_once_per_run_not_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Any] = []
    original = hook_module.takes_batch_idx

    def counting(step: Any) -> bool:
        reads.append(step)
        return original(step)

    monkeypatch.setattr(hook_module, "takes_batch_idx", counting)
    quiet_trainer(tmp_path, limit_train_batches=4, limit_val_batches=0).fit(WithoutBatchIdx(), make_loader())
    assert len(reads) == 1


# ---- on_exception sees the stage that failed ------------------------------------------------------------


class StageAtException(L.Callback):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.seen.append((trainer.state.status, trainer.state.stage, trainer.training, trainer.sanity_checking))


@pytest.mark.parametrize(
    ("fn", "hook", "stage"),
    [
        ("fit", "training_step", L.RunningStage.TRAINING),
        ("fit", "validation_step", L.RunningStage.SANITY_CHECKING),
        ("validate", "validation_step", L.RunningStage.VALIDATING),
        ("test", "test_step", L.RunningStage.TESTING),
        ("predict", "predict_step", L.RunningStage.PREDICTING),
    ],
)
def test_on_exception_sees_the_stage_that_failed(tmp_path: Path, fn: str, hook: str, stage: Any) -> None:
    probe = StageAtException()
    trainer = quiet_trainer(tmp_path, callbacks=[probe], limit_train_batches=2, limit_val_batches=2)
    with pytest.raises(Boom):
        getattr(trainer, fn)(TinyModel(fail_in=hook), make_loader(), *([make_loader()] if fn == "fit" else []))
    status, seen_stage, training, sanity = probe.seen[0]
    assert status == L.TrainerStatus.INTERRUPTED and seen_stage == stage
    assert (training, sanity) == (stage == L.RunningStage.TRAINING, stage == L.RunningStage.SANITY_CHECKING)
    assert trainer.state.stage is None and trainer.interrupted  # once the interrupt path is done


# ---- grad mode of the evaluation hooks ------------------------------------------------------------------


class GradModes(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.modes: dict[str, tuple[bool, bool]] = {}

    def _record(self, hook: str) -> None:
        self.modes[f"{self.trainer.state.fn}:{hook}"] = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())

    def on_validation_model_eval(self) -> None:
        self._record("on_validation_model_eval")
        super().on_validation_model_eval()

    def on_validation_start(self) -> None:
        self._record("on_validation_start")

    def on_validation_epoch_start(self) -> None:
        self._record("on_validation_epoch_start")

    def on_validation_end(self) -> None:
        self._record("on_validation_end")

    def on_test_start(self) -> None:
        self._record("on_test_start")

    def on_test_epoch_end(self) -> None:
        self._record("on_test_epoch_end")

    def on_predict_start(self) -> None:
        self._record("on_predict_start")

    def on_predict_end(self) -> None:
        self._record("on_predict_end")


def test_evaluation_start_and_end_hooks_run_without_grad(tmp_path: Path) -> None:
    model = GradModes()
    trainer = quiet_trainer(tmp_path, limit_train_batches=1, limit_val_batches=1, num_sanity_val_steps=0)
    trainer.fit(model, make_loader(), make_loader())
    trainer.validate(model, make_loader(), verbose=False)
    trainer.test(model, make_loader(), verbose=False)
    trainer.predict(model, make_loader())
    no_grad, inference = (False, False), (False, True)
    assert model.modes == {
        "fit:on_validation_model_eval": no_grad,  # inside fit: no_grad, never inference mode
        "fit:on_validation_start": no_grad,
        "fit:on_validation_epoch_start": no_grad,
        "fit:on_validation_end": no_grad,
        "validate:on_validation_model_eval": inference,
        "validate:on_validation_start": inference,
        "validate:on_validation_epoch_start": inference,
        "validate:on_validation_end": inference,
        "test:on_test_start": inference,
        "test:on_test_epoch_end": inference,
        "predict:on_predict_start": inference,
        "predict:on_predict_end": inference,
    }


def test_without_inference_mode_evaluation_hooks_run_under_no_grad(tmp_path: Path) -> None:
    model = GradModes()
    quiet_trainer(tmp_path, inference_mode=False).test(model, make_loader(), verbose=False)
    assert model.modes["test:on_test_start"] == (False, False)


# ---- on-exception checkpoint names ----------------------------------------------------------------------


class FailAtStep(L.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise Boom("at step")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"filename": "exception"}, ["exception.ckpt"]),
        ({}, ["epoch=0-step=3.ckpt"]),
        ({"filename": "{step}"}, ["step=3.ckpt"]),
        ({"filename": "x-{epoch}", "auto_insert_metric_name": False}, ["x-0.ckpt"]),
        ({"filename": "exception", "save_last": True}, ["exception.ckpt", "last.ckpt"]),
    ],
)
def test_on_exception_checkpoint_is_named_by_the_template(
    tmp_path: Path, options: dict[str, Any], expected: list[str]
) -> None:
    directory = tmp_path / "ckpts"
    callback = L.ModelCheckpoint(dirpath=directory, save_on_exception=True, every_n_epochs=5, **options)
    trainer = quiet_trainer(
        tmp_path, callbacks=[callback, FailAtStep(3)], enable_checkpointing=True, limit_val_batches=0, max_epochs=5
    )
    with pytest.raises(Boom):
        trainer.fit(TinyModel(), make_loader(n=64))
    assert sorted(os.listdir(directory)) == expected


def test_on_exception_checkpoint_replaces_a_file_of_the_same_name(tmp_path: Path) -> None:
    directory = tmp_path / "ckpts"
    directory.mkdir()
    (directory / "exception.ckpt").write_text("stale")
    callback = L.ModelCheckpoint(dirpath=directory, filename="exception", save_on_exception=True)
    trainer = quiet_trainer(
        tmp_path, callbacks=[callback, FailAtStep(1)], enable_checkpointing=True, limit_val_batches=0
    )
    with pytest.warns(UserWarning, match="not empty"), pytest.raises(Boom):
        trainer.fit(TinyModel(), make_loader())
    assert os.listdir(directory) == ["exception.ckpt"]
    assert torch.load(directory / "exception.ckpt", weights_only=False)["global_step"] == 1


# ---- EarlyStopping records why it stopped ---------------------------------------------------------------


class ConstantValLoss(TinyModel):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", 1.0)


def test_early_stopping_records_its_stopping_reason_and_checkpoints_it(tmp_path: Path) -> None:
    stopper = L.EarlyStopping("val_loss", patience=2)
    assert stopper.stopping_reason is EarlyStoppingReason.NOT_STOPPED and stopper.stopping_reason_message is None
    trainer = quiet_trainer(tmp_path, callbacks=[stopper], max_epochs=10, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(ConstantValLoss(), make_loader(), make_loader())
    assert trainer.current_epoch == 3  # epoch 0 sets the best, epochs 1 and 2 do not improve
    assert stopper.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert "did not improve in the last 2 records" in (stopper.stopping_reason_message or "")
    path = tmp_path / "stopped.ckpt"
    trainer.save_checkpoint(path)
    state = torch.load(path, weights_only=False)["callbacks"][stopper.state_key]
    assert (state["stopping_reason"], state["stopping_reason_message"]) == (3, stopper.stopping_reason_message)
    restored = L.EarlyStopping("val_loss", patience=2)
    restored.load_state_dict(state)
    assert restored.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert [reason.value for reason in EarlyStoppingReason] == [0, 1, 2, 3, 4]


# ---- a ModelCheckpoint monitor that is never logged -----------------------------------------------------


def test_a_monitor_never_logged_is_an_error_once_validation_has_run(tmp_path: Path) -> None:
    callback = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="never_logged")
    trainer = quiet_trainer(
        tmp_path, callbacks=[callback], enable_checkpointing=True, limit_train_batches=2, limit_val_batches=1
    )
    # the save at the train epoch end follows this epoch's validation, so the key cannot still be coming
    with pytest.raises(MisconfigurationException, match="could not find the monitored key"):
        trainer.fit(TinyModel(), make_loader(), make_loader())


def test_a_monitor_never_logged_only_warns_while_no_validation_ran(tmp_path: Path) -> None:
    callback = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="never_logged")
    trainer = quiet_trainer(
        tmp_path, callbacks=[callback], enable_checkpointing=True, limit_train_batches=2, limit_val_batches=0
    )
    with pytest.warns(UserWarning, match="could not find the monitored key"):
        trainer.fit(TinyModel(), make_loader())
    assert not (tmp_path / "ckpts").exists() or os.listdir(tmp_path / "ckpts") == []


def test_default_root_dir_expands_the_home_directory_and_leaves_urls_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # a "~" taken literally would be a folder here
    trainer = L.Trainer(default_root_dir="~/runs/../logs", max_epochs=1, logger=False, enable_progress_bar=False)
    assert trainer.default_root_dir == str(tmp_path / "logs")
    trainer.fit(TinyModel(), make_loader())
    assert (tmp_path / "logs" / "checkpoints").is_dir() and not (tmp_path / "~").exists()
    assert L.Trainer(default_root_dir="memory://runs", logger=False).default_root_dir == "memory://runs"
