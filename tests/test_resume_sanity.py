"""Whether a resumed fit runs the sanity check, as in Lightning 2.6: not when it resumes inside an epoch (the
restored loop state must not be disturbed), yes when it resumes at an epoch boundary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import TinyModel, make_loader, quiet_trainer

import statemachine as L


class Flow(L.Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self.calls.append("sanity")

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.calls.append(f"epoch_start {trainer.current_epoch}")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.calls.append(f"batch {batch_idx}")

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.calls.append(f"validation at step {trainer.global_step}")


def _first_run(tmp_path: Path, checkpoint: dict[str, Any], **flags: Any) -> Path:
    directory = tmp_path / "first"
    callback = L.ModelCheckpoint(dirpath=directory, save_top_k=-1, **checkpoint)
    trainer = quiet_trainer(
        tmp_path, callbacks=[callback], enable_checkpointing=True, limit_val_batches=2, num_sanity_val_steps=1, **flags
    )
    trainer.fit(TinyModel(), make_loader(), make_loader())  # 4 training batches per epoch
    return directory


def _resume(tmp_path: Path, path: Path) -> list[str]:
    flow = Flow()
    trainer = quiet_trainer(tmp_path, callbacks=[flow], max_epochs=2, limit_val_batches=2, num_sanity_val_steps=1)
    # the first run's ModelCheckpoint is not part of this one, which Lightning points out
    with pytest.warns(UserWarning, match="holds state for callbacks that are not in this run"):
        trainer.fit(TinyModel(), make_loader(), make_loader(), ckpt_path=path)
    return flow.calls


SECOND_EPOCH = ["epoch_start 1", "batch 0", "batch 1", "batch 2", "batch 3", "validation at step 8"]


def test_a_fit_resumed_from_a_mid_epoch_checkpoint_runs_no_sanity_check(tmp_path: Path) -> None:
    directory = _first_run(tmp_path, {"every_n_train_steps": 2}, max_steps=2)
    calls = _resume(tmp_path, directory / "epoch=0-step=2.ckpt")
    assert calls == ["batch 2", "batch 3", "validation at step 4", *SECOND_EPOCH]


def test_a_fit_resumed_after_a_mid_epoch_validation_neither_sanity_checks_nor_repeats_it(tmp_path: Path) -> None:
    directory = _first_run(tmp_path, {}, val_check_interval=2)  # saved at that validation's end
    calls = _resume(tmp_path, directory / "epoch=0-step=2.ckpt")
    assert calls == ["batch 2", "batch 3", "validation at step 4", *SECOND_EPOCH]


@pytest.mark.parametrize("save_on_train_epoch_end", [True, False])
def test_a_fit_resumed_at_an_epoch_boundary_runs_the_sanity_check(
    tmp_path: Path, save_on_train_epoch_end: bool
) -> None:
    directory = _first_run(tmp_path, {"save_on_train_epoch_end": save_on_train_epoch_end})
    calls = _resume(tmp_path, directory / "epoch=0-step=4.ckpt")
    assert calls == ["sanity", *SECOND_EPOCH]
