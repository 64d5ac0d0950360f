"""The exact hook sequences Lightning 2.6 produces (entry order), recorded with `tests/hooked.py`.

The expected lists are built from short names for repeated runs of hooks: T (batch transfer), VAL (one evaluation
run), SAVE (a checkpoint save) and the automatic/manual training batch of 5.2/5.3. One user callback comes
first, then `ModelCheckpoint` (whose own hooks are not recorded), as in Lightning's hook tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hooked import HookedDataModule, HookedModel, ManualHookedModel, RecordingCallback

import statemachine as L

# ---- short names for repeated runs of hooks ------------------------------------------------------------------


def both(name: str, *details: Any) -> list[str]:
    """`Callback.x` then `x`: callbacks first, then the LightningModule (Lightning's owner order)."""
    suffix = f"({', '.join(str(d) for d in details)})" if details else ""
    return [f"Callback.{name}{suffix}", f"{name}{suffix}"]


T = ["on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer"]
SAVE = ["Callback.state_dict", "Callback.on_save_checkpoint", "on_save_checkpoint"]
RESTORE = ["on_load_checkpoint", "Callback.on_load_checkpoint", "Callback.load_state_dict"]


def val(batches: int, noun: str = "validation") -> list[str]:
    """VAL: one evaluation run over `batches` batches of a single loader."""
    sequence = [f"on_{noun}_model_eval", *both(f"on_{noun}_start"), *both(f"on_{noun}_epoch_start")]
    for i in range(batches):
        sequence += [*T, *both(f"on_{noun}_batch_start", i), f"{noun}_step({i})", *both(f"on_{noun}_batch_end", i)]
    return [*sequence, *both(f"on_{noun}_epoch_end"), *both(f"on_{noun}_end"), f"on_{noun}_model_train"]


def auto_batch(
    i: int, epoch: int = 0, *, steps: bool = True, zero_grad: bool = True, scheduler: bool = False
) -> list[str]:
    """5.2: one automatic-optimization batch. An accumulating batch (`steps=False`) has no optimizer_step and no
    pre-step/clipping hooks; the zero-grad hooks run only on a window's first batch."""
    sequence = [*T, *both("on_train_batch_start", i)]
    if steps:
        sequence.append(f"optimizer_step({epoch}, {i})")
    sequence.append(f"training_step({i})")
    if zero_grad:
        sequence += [*both("on_before_zero_grad"), f"optimizer_zero_grad({epoch}, {i})"]
    sequence += [*both("on_before_backward"), "backward", *both("on_after_backward")]
    if steps:
        sequence += [
            *both("on_before_optimizer_step"),
            "configure_gradient_clipping(None, None)",
            "clip_gradients(None, None)",
        ]
    if scheduler:
        sequence.append("lr_scheduler_step(None)")
    return [*sequence, *both("on_train_batch_end", i)]


def manual_batch(i: int) -> list[str]:
    """5.3: one manual-optimization batch (zero_grad, manual_backward, step(closure) inside training_step)."""
    return [
        *T,
        *both("on_train_batch_start", i),
        f"training_step({i})",
        "manual_backward",
        *both("on_before_backward"),
        "backward",
        *both("on_after_backward"),
        "closure",
        *both("on_before_optimizer_step"),
        *both("on_train_batch_end", i),
    ]


def entry(stage: str) -> list[str]:
    """Line 1 of 5.1/5.4/5.6/5.7, up to `configure_model`."""
    return ["configure_callbacks", "prepare_data", f"Callback.setup({stage})", f"setup({stage})", "configure_model"]


def exit_(stage: str) -> list[str]:
    return [f"Callback.teardown({stage})", f"teardown({stage})"]


FIT_START = ["configure_optimizers", *both("on_fit_start")]
TRAIN_START = ["train_dataloader", *both("on_train_start")]
FIT_END = [*both("on_train_end"), *both("on_fit_end"), *exit_("fit")]
CHECKPOINT_KEYS = [
    "epoch",
    "global_step",
    "pytorch-lightning_version",
    "state_dict",
    "loops",
    "callbacks",
    "optimizer_states",
    "lr_schedulers",
    "statemachine_resume",  # the exact-resume state, in an extra key after Lightning's
]


def make_trainer(
    tmp_path: Path,
    called: list[str],
    *,
    callbacks: list[L.Callback] | None = None,
    checkpoint: bool = True,
    **flags: Any,
) -> L.Trainer:
    """A tiny trainer: the recording callback (unless `callbacks` is given), then a ModelCheckpoint (unless
    `checkpoint` is False; no default one is added then either)."""
    chosen = [RecordingCallback(called)] if callbacks is None else list(callbacks)
    if checkpoint:
        chosen.append(L.ModelCheckpoint(dirpath=tmp_path))
    return L.Trainer(
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(isinstance(c, L.ModelCheckpoint) for c in chosen),
        default_root_dir=tmp_path,
        callbacks=chosen,
        **flags,
    )


def assert_sequence(called: list[str], expected: list[str]) -> None:
    """Equal lists; on a mismatch, say where they first differ (the full lists are long)."""
    if called != expected:
        index = next((i for i, (a, b) in enumerate(zip(called, expected)) if a != b), min(len(called), len(expected)))
        window = slice(max(0, index - 3), index + 4)
        raise AssertionError(
            f"hook sequences differ at index {index}:\n  recorded {called[window]}\n  expected {expected[window]}\n"
            f"  lengths {len(called)} recorded vs {len(expected)} expected"
        )


def fit_once(dirpath: Path, **flags: Any) -> str:
    """A first fit whose checkpoint a later run loads; returns the checkpoint's path."""
    trainer = make_trainer(dirpath, [], **flags)
    trainer.fit(HookedModel([]))
    path = trainer.checkpoint_callback.best_model_path
    assert path
    return path


# ---- 5.1 fit with validation ------------------------------------------------------------------------------


def test_fit_with_validation_and_sanity_check(tmp_path: Path) -> None:
    called: list[str] = []
    model = HookedModel(called)
    trainer = make_trainer(tmp_path, called, max_epochs=1, limit_train_batches=2, limit_val_batches=2)
    trainer.fit(model)

    expected = [
        *entry("fit"),
        *FIT_START,
        "Callback.on_sanity_check_start",
        "val_dataloader",
        *val(2),
        "Callback.on_sanity_check_end",
        *TRAIN_START,
        *both("on_train_epoch_start"),
        *auto_batch(0),
        *auto_batch(1, scheduler=True),
        "on_validation_model_zero_grad",
        *val(2),
        *both("on_train_epoch_end"),
        *SAVE,
        *FIT_END,
    ]
    assert_sequence(called, expected)

    assert len(model.saved_checkpoints) == 1
    saved = model.saved_checkpoints[0]
    assert list(saved) == CHECKPOINT_KEYS
    assert (saved["epoch"], saved["global_step"]) == (0, 2)
    on_disk = torch.load(tmp_path / "epoch=0-step=2.ckpt", weights_only=False)
    assert list(on_disk) == CHECKPOINT_KEYS


def test_fit_without_sanity_check_requests_val_loader_after_train_loader(tmp_path: Path) -> None:
    called: list[str] = []
    trainer = make_trainer(
        tmp_path, called, max_epochs=1, limit_train_batches=2, limit_val_batches=2, num_sanity_val_steps=0
    )
    trainer.fit(HookedModel(called))

    expected = [
        *entry("fit"),
        *FIT_START,
        "train_dataloader",
        "val_dataloader",
        *both("on_train_start"),
        *both("on_train_epoch_start"),
        *auto_batch(0),
        *auto_batch(1, scheduler=True),
        "on_validation_model_zero_grad",
        *val(2),
        *both("on_train_epoch_end"),
        *SAVE,
        *FIT_END,
    ]
    assert_sequence(called, expected)


# ---- 5.2 automatic optimization and accumulation -----------------------------------------------------------


def test_accumulating_batches_skip_the_step_and_zero_grad_only_on_a_window_start(tmp_path: Path) -> None:
    called: list[str] = []
    model = HookedModel(called)
    trainer = make_trainer(
        tmp_path, called, max_epochs=1, limit_train_batches=4, limit_val_batches=0, accumulate_grad_batches=2
    )
    trainer.fit(model)

    expected = [
        *entry("fit"),
        *FIT_START,
        *TRAIN_START,
        *both("on_train_epoch_start"),
        *auto_batch(0, steps=False, zero_grad=True),
        *auto_batch(1, steps=True, zero_grad=False),
        *auto_batch(2, steps=False, zero_grad=True),
        *auto_batch(3, steps=True, zero_grad=False, scheduler=True),
        *both("on_train_epoch_end"),
        *SAVE,
        *FIT_END,
    ]
    assert_sequence(called, expected)
    assert trainer.global_step == 2
    # outputs["loss"] is a detached copy of the loss divided by accumulate_grad_batches
    for outputs, loss in zip(model.train_batch_end_outputs, model.training_losses, strict=True):
        assert set(outputs) == {"loss"}
        assert not outputs["loss"].requires_grad
        torch.testing.assert_close(outputs["loss"], loss / 2)


@pytest.mark.parametrize(
    ("k", "batches", "zero_grad_at", "step_at"),
    [(2, 4, [0, 2], [1, 3]), (3, 7, [0, 3, 6], [2, 5, 6])],
)
def test_accumulation_windows(
    tmp_path: Path, k: int, batches: int, zero_grad_at: list[int], step_at: list[int]
) -> None:
    """Reference 3.5: k=3 with 7 batches zeroes at 0, 3, 6 and steps after 2, 5, 6 (the last batch always steps)."""
    called: list[str] = []
    trainer = make_trainer(
        tmp_path,
        called,
        checkpoint=False,
        max_epochs=1,
        limit_train_batches=batches,
        limit_val_batches=0,
        accumulate_grad_batches=k,
    )
    trainer.fit(HookedModel(called))
    assert [e for e in called if e.startswith("optimizer_zero_grad")] == [
        f"optimizer_zero_grad(0, {i})" for i in zero_grad_at
    ]
    assert [e for e in called if e.startswith("optimizer_step")] == [f"optimizer_step(0, {i})" for i in step_at]
    assert trainer.global_step == len(step_at)


# ---- 5.3 manual optimization --------------------------------------------------------------------------------


def test_manual_optimization_batch(tmp_path: Path) -> None:
    called: list[str] = []
    model = ManualHookedModel(called)
    trainer = make_trainer(tmp_path, called, max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(model)

    expected = [
        *entry("fit"),
        *FIT_START,
        *TRAIN_START,
        *both("on_train_epoch_start"),
        *manual_batch(0),
        *manual_batch(1),
        *both("on_train_epoch_end"),
        *SAVE,
        *FIT_END,
    ]
    assert_sequence(called, expected)
    assert trainer.global_step == 2
    assert [set(outputs) for outputs in model.train_batch_end_outputs] == [{"loss"}, {"loss"}]
    # the trainer never steps schedulers under manual optimization
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 0


# ---- 5.4 / 5.5 resume ---------------------------------------------------------------------------------------


# The resumed ModelCheckpoint saves elsewhere, so it says it cannot reuse the first run's ranking.
@pytest.mark.filterwarnings("ignore:The dirpath has changed:UserWarning")
def test_resume_from_end_of_epoch_checkpoint(tmp_path: Path) -> None:
    path = fit_once(tmp_path / "first", max_epochs=1, limit_train_batches=2, limit_val_batches=0)
    assert Path(path).name == "epoch=0-step=2.ckpt"

    called: list[str] = []
    model = HookedModel(called)
    trainer = make_trainer(tmp_path / "second", called, max_epochs=2, limit_train_batches=2, limit_val_batches=0)
    trainer.fit(model, ckpt_path=path)

    expected = [
        *entry("fit"),
        *RESTORE,
        *FIT_START,
        *TRAIN_START,
        *both("on_train_epoch_start"),
        *auto_batch(0, epoch=1),
        *auto_batch(1, epoch=1, scheduler=True),
        *both("on_train_epoch_end"),
        *SAVE,
        *FIT_END,
    ]
    assert_sequence(called, expected)
    loaded = model.loaded_checkpoints[0]
    assert (loaded["epoch"], loaded["global_step"]) == (0, 2)
    saved = model.saved_checkpoints[0]
    assert (saved["epoch"], saved["global_step"]) == (1, 4)


@pytest.mark.filterwarnings("ignore:The dirpath has changed:UserWarning")
def test_resume_mid_epoch_has_no_epoch_start(tmp_path: Path) -> None:
    path = fit_once(tmp_path / "first", max_steps=1, limit_train_batches=5, limit_val_batches=0)
    assert Path(path).name == "epoch=0-step=1.ckpt"

    called: list[str] = []
    model = HookedModel(called)
    trainer = make_trainer(tmp_path / "second", called, max_steps=3, limit_train_batches=5, limit_val_batches=0)
    trainer.fit(model, ckpt_path=path)

    expected = [
        *entry("fit"),
        *RESTORE,
        *FIT_START,
        *TRAIN_START,
        *auto_batch(1),
        *auto_batch(2),
        *both("on_train_epoch_end"),
        *SAVE,
        *FIT_END,
    ]
    assert_sequence(called, expected)
    loaded = model.loaded_checkpoints[0]
    assert (loaded["epoch"], loaded["global_step"]) == (0, 1)
    assert model.saved_checkpoints[0]["global_step"] == 3


# ---- 5.6 validate / test ------------------------------------------------------------------------------------

EVAL_CASES = [("validate", "validation", "val"), ("test", "test", "test")]


@pytest.mark.parametrize(("verb", "noun", "kind"), EVAL_CASES)
def test_validate_and_test(tmp_path: Path, verb: str, noun: str, kind: str) -> None:
    called: list[str] = []
    trainer = make_trainer(tmp_path, called, **{f"limit_{kind}_batches": 2})
    results = getattr(trainer, verb)(HookedModel(called), verbose=False)

    expected = [*entry(verb), f"{kind}_dataloader", *val(2, noun), *exit_(verb)]
    assert_sequence(called, expected)
    assert len(results) == 1


@pytest.mark.parametrize(("verb", "noun", "kind"), EVAL_CASES)
def test_validate_and_test_with_a_checkpoint_restore_first(tmp_path: Path, verb: str, noun: str, kind: str) -> None:
    path = fit_once(tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=0)

    called: list[str] = []
    model = HookedModel(called)
    trainer = make_trainer(tmp_path, called, **{f"limit_{kind}_batches": 1})
    getattr(trainer, verb)(model, ckpt_path=path, verbose=False)

    expected = [*entry(verb), *RESTORE, f"{kind}_dataloader", *val(1, noun), *exit_(verb)]
    assert_sequence(called, expected)


@pytest.mark.parametrize(("verb", "noun", "kind"), EVAL_CASES)
def test_validate_and_test_with_limit_zero_never_request_the_loader(
    tmp_path: Path, verb: str, noun: str, kind: str
) -> None:
    called: list[str] = []
    trainer = make_trainer(tmp_path, called, **{f"limit_{kind}_batches": 0})
    results = getattr(trainer, verb)(HookedModel(called), verbose=False)

    assert_sequence(called, [*entry(verb), *exit_(verb)])
    assert results == []


# ---- 5.7 predict --------------------------------------------------------------------------------------------


def test_predict(tmp_path: Path) -> None:
    called: list[str] = []
    trainer = make_trainer(tmp_path, called, limit_predict_batches=2)
    predictions = trainer.predict(HookedModel(called))

    per_batch = [
        step
        for i in range(2)
        for step in [*T, *both("on_predict_batch_start", i), f"predict_step({i})", *both("on_predict_batch_end", i)]
    ]
    expected = [
        *entry("predict"),
        "predict_dataloader",
        "on_predict_model_eval",
        *both("on_predict_start"),
        *both("on_predict_epoch_start"),
        *per_batch,
        *both("on_predict_epoch_end"),
        *both("on_predict_end"),
        "on_predict_model_train",
        *exit_("predict"),
    ]
    assert_sequence(called, expected)
    assert len(predictions) == 2


def test_predict_with_limit_zero_never_requests_the_loader(tmp_path: Path) -> None:
    """Reference 4: no loader is requested when the limit is 0, so no predict hook runs either."""
    called: list[str] = []
    trainer = make_trainer(tmp_path, called, limit_predict_batches=0)
    trainer.predict(HookedModel(called))

    assert_sequence(called, [*entry("predict"), *exit_("predict")])


class ModeProbe(HookedModel):
    """Remembers whether it was in training mode inside each predict step."""

    def __init__(self, called: list[str]) -> None:
        super().__init__(called)
        self.training_in_step: list[bool] = []

    def predict_step(self, batch: torch.Tensor, batch_idx: int) -> Any:
        self.training_in_step.append(self.training)
        return super().predict_step(batch, batch_idx)


def test_on_predict_model_train_restores_every_submodule_mode(tmp_path: Path) -> None:
    """Reference 9.3: predict puts the model in eval, and the default `on_predict_model_train` restores each
    submodule's own mode (a submodule in eval before stays in eval)."""
    model = ModeProbe([])
    model.train()
    model.layer.eval()
    trainer = make_trainer(tmp_path, [], limit_predict_batches=1)
    trainer.predict(model)

    assert model.training_in_step == [False]
    assert model.training is True
    assert model.layer.training is False


# ---- 5.8 DataModule hooks and owner order -------------------------------------------------------------------


def test_datamodule_hooks_in_fit(tmp_path: Path) -> None:
    called: list[str] = []
    trainer = make_trainer(tmp_path, called, max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(HookedModel(called), datamodule=HookedDataModule(called))

    assert [e for e in called if e.startswith("DataModule.")] == [
        "DataModule.prepare_data",
        "DataModule.setup(fit)",
        "DataModule.val_dataloader",
        "DataModule.train_dataloader",
        "DataModule.state_dict",
        "DataModule.teardown(fit)",
    ]
    # owner order: prepare_data DataModule -> LM; setup/teardown DataModule -> Callbacks -> LM
    assert called[:6] == [
        "configure_callbacks",
        "DataModule.prepare_data",
        "prepare_data",
        "DataModule.setup(fit)",
        "Callback.setup(fit)",
        "setup(fit)",
    ]
    assert called[-3:] == ["DataModule.teardown(fit)", "Callback.teardown(fit)", "teardown(fit)"]
    # SAVE with a DataModule: Callback.state_dict -> DataModule.state_dict -> Callback.on_save_checkpoint -> LM
    start = called.index("Callback.state_dict")
    assert called[start : start + 4] == [
        "Callback.state_dict",
        "DataModule.state_dict",
        "Callback.on_save_checkpoint",
        "on_save_checkpoint",
    ]
    # the module's own loader hooks are not used when a DataModule provides the loaders
    assert not [e for e in called if e in ("train_dataloader", "val_dataloader")]


@pytest.mark.parametrize(("verb", "kind"), [("validate", "val"), ("test", "test"), ("predict", "predict")])
def test_datamodule_hooks_in_validate_test_predict(tmp_path: Path, verb: str, kind: str) -> None:
    called: list[str] = []
    trainer = make_trainer(tmp_path, called, **{f"limit_{kind}_batches": 1})
    getattr(trainer, verb)(HookedModel(called), datamodule=HookedDataModule(called))

    assert [e for e in called if e.startswith("DataModule.")] == [
        "DataModule.prepare_data",
        f"DataModule.setup({verb})",
        f"DataModule.{kind}_dataloader",
        f"DataModule.teardown({verb})",
    ]
    assert called[-3:] == [f"DataModule.teardown({verb})", f"Callback.teardown({verb})", f"teardown({verb})"]


class FailingModel(HookedModel):
    def training_step(self, batch: torch.Tensor, batch_idx: int) -> Any:
        raise ValueError("boom")


def test_on_exception_runs_callbacks_then_datamodule_and_no_teardown(tmp_path: Path) -> None:
    called: list[str] = []
    trainer = make_trainer(tmp_path, called, max_epochs=1, limit_train_batches=1, limit_val_batches=0)
    with pytest.raises(ValueError, match="boom"):
        trainer.fit(FailingModel(called), datamodule=HookedDataModule(called))

    assert called[-2:] == ["Callback.on_exception", "DataModule.on_exception"]
    assert not [e for e in called if "teardown" in e or e.endswith(("on_train_end", "on_fit_end"))]


# ---- callback ordering ----------------------------------------------------------------------------------------


class RecordingEarlyStopping(L.EarlyStopping):
    def __init__(self, called: list[str]) -> None:
        super().__init__(monitor="epoch_metric")
        self.called = called

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.called.append("EarlyStopping.on_train_epoch_end")
        super().on_train_epoch_end(trainer, pl_module)


class RecordingCheckpoint(L.ModelCheckpoint):
    def __init__(self, called: list[str], dirpath: Path) -> None:
        super().__init__(dirpath=dirpath, monitor="epoch_metric")
        self.called = called

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.called.append("Checkpoint.on_train_epoch_end")
        super().on_train_epoch_end(trainer, pl_module)


class EpochMetricModel(HookedModel):
    """Logs the metric the monitoring callbacks read, in `on_train_epoch_end` itself."""

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        self.log("epoch_metric", 1.0)


def test_monitoring_callbacks_run_after_the_module_in_on_train_epoch_end(tmp_path: Path) -> None:
    called: list[str] = []
    checkpoint = RecordingCheckpoint(called, tmp_path)
    early_stopping = RecordingEarlyStopping(called)
    plain = RecordingCallback(called)
    trainer = make_trainer(
        tmp_path,
        called,
        callbacks=[checkpoint, early_stopping, plain],
        checkpoint=False,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=0,
    )
    trainer.fit(EpochMetricModel(called))

    assert [e for e in called if e.endswith("on_train_epoch_end")] == [
        "Callback.on_train_epoch_end",
        "on_train_epoch_end",
        "EarlyStopping.on_train_epoch_end",
        "Checkpoint.on_train_epoch_end",
    ]
    # both saw what the module logged at epoch end (strict monitors would have raised otherwise)
    assert checkpoint.best_model_path
    assert early_stopping.best_score == 1.0


def test_checkpoint_callbacks_are_last_in_the_list(tmp_path: Path) -> None:
    checkpoint = L.ModelCheckpoint(dirpath=tmp_path)
    plain = RecordingCallback([])
    early_stopping = L.EarlyStopping(monitor="x")
    trainer = make_trainer(tmp_path, [], callbacks=[checkpoint, plain, early_stopping], checkpoint=False)
    assert trainer.callbacks == [plain, early_stopping, checkpoint]


class ConfiguredCallbacksModel(HookedModel):
    """`configure_callbacks` returns a RecordingCallback (replacing the trainer's) and a ModelCheckpoint."""

    def __init__(self, called: list[str], dirpath: Path) -> None:
        super().__init__(called)
        self.own_recorder = RecordingCallback(called, label="Model")
        self.own_checkpoint = L.ModelCheckpoint(dirpath=dirpath, filename="own")

    def configure_callbacks(self) -> Any:
        super().configure_callbacks()
        return [self.own_checkpoint, self.own_recorder]


def test_configure_callbacks_replaces_same_type_callbacks_and_keeps_checkpoints_last(tmp_path: Path) -> None:
    called: list[str] = []
    trainer_recorder = RecordingCallback(called, label="Trainer")
    early_stopping = L.EarlyStopping(monitor="x", strict=False)
    trainer = make_trainer(
        tmp_path,
        called,
        callbacks=[trainer_recorder, early_stopping],
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=0,
    )
    model = ConfiguredCallbacksModel(called, tmp_path)
    trainer.fit(model)

    # same types replaced (RecordingCallback, ModelCheckpoint), others kept, checkpoints last
    assert trainer.callbacks == [early_stopping, model.own_recorder, model.own_checkpoint]
    assert not [e for e in called if e.startswith("Trainer.")]
    assert called[:4] == ["configure_callbacks", "prepare_data", "Model.setup(fit)", "setup(fit)"]
    assert called[-2:] == ["Model.teardown(fit)", "teardown(fit)"]
    assert (tmp_path / "own.ckpt").exists()


# ---- on_train_batch_start returning -1 ------------------------------------------------------------------------


class StopAtSecondBatch(HookedModel):
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        super().on_train_batch_start(batch, batch_idx)
        return -1 if batch_idx == 1 else None


def test_on_train_batch_start_minus_one_ends_the_epoch(tmp_path: Path) -> None:
    """That batch gets no step, no on_train_batch_end and no validation; as the epoch's last batch it still steps
    the (epoch-interval) LR scheduler, as in Lightning; the epoch-end hooks still run."""
    called: list[str] = []
    trainer = make_trainer(
        tmp_path, called, max_epochs=1, limit_train_batches=3, limit_val_batches=1, num_sanity_val_steps=0
    )
    trainer.fit(StopAtSecondBatch(called))

    expected = [
        *entry("fit"),
        *FIT_START,
        "train_dataloader",
        "val_dataloader",
        *both("on_train_start"),
        *both("on_train_epoch_start"),
        *auto_batch(0),
        *T,
        *both("on_train_batch_start", 1),
        "lr_scheduler_step(None)",
        *both("on_train_epoch_end"),
        *SAVE,
        *FIT_END,
    ]
    assert_sequence(called, expected)
    assert trainer.global_step == 1


# ---- the recorders themselves -----------------------------------------------------------------------------------


def test_the_recording_callback_overrides_every_callback_hook() -> None:
    hooks = [name for name in vars(L.Callback) if not name.startswith("_") and callable(getattr(L.Callback, name))]
    assert "on_train_batch_start" in hooks
    missing = [name for name in hooks if name not in vars(RecordingCallback)]
    assert missing == []


# LightningModule's documented hooks, written out so a hook dropped from the module fails this test.
MODULE_HOOKS = [
    "on_fit_start",
    "on_fit_end",
    "on_train_start",
    "on_train_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_validation_start",
    "on_validation_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_test_start",
    "on_test_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
    "on_predict_start",
    "on_predict_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
    "on_after_backward",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "configure_callbacks",
    "configure_optimizers",
    "train_dataloader",
    "val_dataloader",
    "test_dataloader",
    "predict_dataloader",
    "on_before_batch_transfer",
    "transfer_batch_to_device",
    "on_after_batch_transfer",
    "training_step",
    "validation_step",
    "test_step",
    "predict_step",
    "optimizer_step",
    "optimizer_zero_grad",
    "backward",
    "manual_backward",
    "configure_gradient_clipping",
    "clip_gradients",
    "lr_scheduler_step",
    "on_validation_model_zero_grad",
    "on_validation_model_eval",
    "on_validation_model_train",
    "on_test_model_eval",
    "on_test_model_train",
    "on_predict_model_eval",
    "on_predict_model_train",
]


def test_the_hooked_model_overrides_every_module_hook() -> None:
    assert all(callable(getattr(L.LightningModule, name)) for name in MODULE_HOOKS)
    assert [name for name in MODULE_HOOKS if name not in vars(HookedModel)] == []
