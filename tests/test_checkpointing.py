"""Checkpoints: the Lightning file layout, resuming fit exactly, ckpt_path rules, defaults, SIGTERM."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer

import statemachine as L
from devices.checkpoint_io import CorruptCheckpointError, load_checkpoint


class MomentumModel(TinyModel):
    """SGD with momentum and a StepLR, so a resume that forgot optimizer or scheduler state would diverge."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def _fresh_model() -> MomentumModel:
    torch.manual_seed(7)
    return MomentumModel()


def test_checkpoint_has_lightning_keys_in_order(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    model = _fresh_model()
    model.save_hyperparameters({"lr": 0.1})
    trainer.fit(model, make_loader())
    trainer.save_checkpoint(tmp_path / "x.ckpt")
    content = load_checkpoint(str(tmp_path / "x.ckpt"))
    assert list(content)[:5] == ["epoch", "global_step", "pytorch-lightning_version", "state_dict", "loops"]
    assert {"callbacks", "optimizer_states", "lr_schedulers", "hyper_parameters"} <= set(content)
    assert (content["epoch"], content["global_step"]) == (1, 2)
    assert set(content["loops"]) == {"fit_loop", "validate_loop", "test_loop", "predict_loop"}
    epoch_progress = content["loops"]["fit_loop"]["epoch_progress"]["total"]
    assert epoch_progress == {"ready": 1, "started": 1, "processed": 1, "completed": 1}
    weights_only = tmp_path / "w.ckpt"
    trainer.save_checkpoint(weights_only, weights_only=True)
    assert "optimizer_states" not in load_checkpoint(str(weights_only))


def test_resume_from_epoch_end_matches_an_uninterrupted_run(tmp_path: Any) -> None:
    straight = quiet_trainer(tmp_path / "a", max_epochs=3, limit_train_batches=3)
    reference = _fresh_model()
    straight.fit(reference, make_loader())

    first = quiet_trainer(tmp_path / "b", max_epochs=1, limit_train_batches=3)
    model = _fresh_model()
    first.fit(model, make_loader())
    first.save_checkpoint(tmp_path / "epoch1.ckpt")

    resumed = quiet_trainer(tmp_path / "c", max_epochs=3, limit_train_batches=3)
    restarted = _fresh_model()
    resumed.fit(restarted, make_loader(), ckpt_path=tmp_path / "epoch1.ckpt")
    assert (resumed.current_epoch, resumed.global_step) == (3, 9)
    for ours, theirs in zip(restarted.parameters(), reference.parameters()):
        assert torch.equal(ours, theirs)
    assert resumed.lr_scheduler_configs[0].scheduler.last_epoch == 3


def test_model_checkpoint_default_file_resumes_through_last_epoch(tmp_path: Any) -> None:
    trainer = L.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=1,
        enable_progress_bar=False,
    )
    few_batches = r"training batches \(2\) is smaller than the logging interval Trainer\(log_every_n_steps=50\)"
    with pytest.warns(L.PossibleUserWarning, match=few_batches):
        trainer.fit(TinyModel(), make_loader(), make_loader())
    directory = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    assert sorted(os.listdir(directory)) == ["epoch=1-step=4.ckpt"]
    assert (tmp_path / "lightning_logs" / "version_0").is_dir()
    again = L.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=3,
        limit_train_batches=2,
        limit_val_batches=1,
        enable_progress_bar=False,
    )
    # The resumed run logs into version_1, so ModelCheckpoint says which of its saved fields it cannot reuse.
    with pytest.warns(UserWarning, match="dirpath has changed from .*version_0.* to .*version_1"):
        with pytest.warns(L.PossibleUserWarning, match=few_batches):
            again.fit(TinyModel(), make_loader(), make_loader(), ckpt_path=str(directory / "epoch=1-step=4.ckpt"))
    assert (again.current_epoch, again.global_step) == (3, 6)


def test_resume_past_max_epochs_is_refused(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=1)
    trainer.fit(TinyModel(), make_loader())
    trainer.save_checkpoint(tmp_path / "e2.ckpt")
    with pytest.raises(L.MisconfigurationException, match="past max_epochs=1"):
        quiet_trainer(tmp_path, max_epochs=1).fit(TinyModel(), make_loader(), ckpt_path=tmp_path / "e2.ckpt")


def test_weights_only_file_cannot_resume_fit_but_can_test(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    model = TinyModel()
    trainer.fit(model, make_loader())
    trainer.save_checkpoint(tmp_path / "w.ckpt", weights_only=True)
    with pytest.raises(KeyError, match="save_weights_only"):
        quiet_trainer(tmp_path, max_epochs=2).fit(TinyModel(), make_loader(), ckpt_path=tmp_path / "w.ckpt")
    fresh = TinyModel()
    quiet_trainer(tmp_path).test(fresh, make_loader(), ckpt_path=tmp_path / "w.ckpt", verbose=False)
    assert torch.equal(fresh.layer.weight, model.layer.weight)


def test_corrupt_checkpoint_names_the_file(tmp_path: Any) -> None:
    path = tmp_path / "broken.ckpt"
    path.write_text("not a checkpoint")
    trainer = quiet_trainer(tmp_path)
    with pytest.raises(CorruptCheckpointError, match="broken.ckpt"):
        trainer.fit(TinyModel(), make_loader(), ckpt_path=path)
    assert trainer.interrupted


def test_save_checkpoint_to_memory_url_and_load_from_checkpoint(tmp_path: Any) -> None:
    class Configurable(TinyModel):
        def __init__(self, width: int = 4, lr: float = 0.1):
            super().__init__(lr=lr)
            self.save_hyperparameters()

    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    model = Configurable(width=4, lr=0.05)
    trainer.fit(model, make_loader())
    trainer.save_checkpoint("memory://ckpts/model.ckpt")
    loaded = Configurable.load_from_checkpoint("memory://ckpts/model.ckpt")
    assert loaded.hparams.lr == 0.05 and loaded.hparams.width == 4
    assert torch.equal(loaded.layer.weight, model.layer.weight)


def test_ckpt_path_best_and_last(tmp_path: Any) -> None:
    checkpoint = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_last=True)
    trainer = quiet_trainer(
        tmp_path, enable_checkpointing=True, callbacks=[checkpoint], max_epochs=2, limit_train_batches=2
    )
    model = TinyModel()
    trainer.fit(model, make_loader(), make_loader())
    assert checkpoint.best_model_path and os.path.exists(checkpoint.best_model_path)
    with pytest.warns(UserWarning, match="without a model"):
        results = trainer.validate(dataloaders=make_loader(), verbose=False)
    assert results[0]["val_loss"] == pytest.approx(float(checkpoint.best_model_score))
    trainer.test(model, make_loader(), ckpt_path="last", verbose=False)
    assert trainer.state.finished


def test_best_without_checkpoint_callback_is_a_clear_error(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=1)
    trainer.fit(TinyModel(), make_loader())
    with pytest.raises(ValueError, match="`ModelCheckpoint` is not configured."):
        trainer.test(dataloaders=make_loader(), ckpt_path="best")


def test_sigterm_raises_exit_143_after_the_batch_and_runs_on_exception(tmp_path: Any) -> None:
    class Terminated(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if batch_idx == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().training_step(batch, batch_idx)

    seen: list[BaseException] = []

    class Saver(L.Callback):
        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            seen.append(exception)
            trainer.save_checkpoint(tmp_path / "on-sigterm.ckpt")

    previous = signal.getsignal(signal.SIGTERM)
    trainer = quiet_trainer(tmp_path, callbacks=[Saver()], limit_train_batches=4)
    with pytest.raises(L.SIGTERMException) as raised:
        trainer.fit(Terminated(), make_loader())
    assert raised.value.code == 143 and seen == [raised.value]
    assert trainer.global_step == 2  # the batch that got the signal finished its step
    assert load_checkpoint(str(tmp_path / "on-sigterm.ckpt"))["global_step"] == 2
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_checkpoint_saved_inside_validation_resumes_without_sanity_check(tmp_path: Any) -> None:
    class SavesInValidation(TinyModel):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            super().validation_step(batch, batch_idx)
            if not self.trainer.sanity_checking and batch_idx == 0:
                self.trainer.save_checkpoint(tmp_path / "in-validation.ckpt")

    trainer = quiet_trainer(tmp_path, limit_train_batches=2, limit_val_batches=2)
    trainer.fit(SavesInValidation(), make_loader(), make_loader())
    resumed = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=2, limit_val_batches=2)
    resumed.fit(TinyModel(), make_loader(), make_loader(), ckpt_path=tmp_path / "in-validation.ckpt")
    assert [r.trigger for r in resumed.history][:2] == ["fit", "begin"]
    assert resumed.history[1].dest == "fitting.train_setup"  # the sanity check was skipped
    fresh = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=2, limit_val_batches=2)
    fresh.fit(TinyModel(), make_loader(), make_loader())
    assert fresh.history[1].dest == "fitting.sanity_checking"


def test_trainer_ckpt_path_reports_the_checkpoint_the_last_run_loaded(tmp_path: Any) -> None:
    first = quiet_trainer(tmp_path, limit_train_batches=1)
    first.fit(TinyModel(), make_loader())
    assert first.ckpt_path is None
    first.save_checkpoint(tmp_path / "a.ckpt")
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_train_batches=1)
    trainer.fit(TinyModel(), make_loader(), ckpt_path=tmp_path / "a.ckpt")
    assert trainer.ckpt_path == str(tmp_path / "a.ckpt")
    trainer.validate(TinyModel(), make_loader(), verbose=False)  # a model and no ckpt_path: nothing is loaded
    assert trainer.ckpt_path is None
    # Set by the user, it is what the next calls load, until a call passes its own.
    trainer.ckpt_path = tmp_path / "a.ckpt"
    trainer.validate(TinyModel(), make_loader(), verbose=False)
    assert trainer.ckpt_path == str(tmp_path / "a.ckpt")
    first.save_checkpoint(tmp_path / "b.ckpt")
    with pytest.warns(UserWarning, match="trainer.ckpt_path was set and a ckpt_path was passed"):
        trainer.validate(TinyModel(), make_loader(), ckpt_path=tmp_path / "b.ckpt", verbose=False)
    assert trainer.ckpt_path == str(tmp_path / "b.ckpt")
    trainer.validate(TinyModel(), make_loader(), verbose=False)
    assert trainer.ckpt_path is None
