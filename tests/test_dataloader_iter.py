"""Step methods taking `dataloader_iter` fetch their own batches, as in Lightning 2.x.

The step gets an iterator of `(batch, batch_idx, dataloader_idx)` and nothing else; the loop counts step calls,
the epoch ends when the data has run out, and the end-of-epoch validation runs after the step that fetched the
last batch.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

import statemachine as L


class FetchesTwo(TinyModel):
    """Fetches two batches per step (or fewer at the end of the data) and records what the hooks saw."""

    def __init__(self, per_step: int = 2) -> None:
        super().__init__()
        self.per_step = per_step
        self.fetched: list[tuple[int, int]] = []
        self.starts: list[tuple[Any, int]] = []
        self.ends: list[int] = []
        self.validations: list[tuple[int, int]] = []
        self.transfers = 0

    def training_step(self, dataloader_iter: Any) -> torch.Tensor:  # type: ignore[override]
        losses = []
        for _ in range(self.per_step):
            (x, y), batch_idx, dataloader_idx = next(dataloader_iter)
            self.fetched.append((batch_idx, dataloader_idx))
            losses.append(nn.functional.cross_entropy(self(x), y))
        return torch.stack(losses).mean()

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.starts.append((None if batch is None else len(batch[0]), batch_idx))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.ends.append(batch_idx)

    def on_validation_start(self) -> None:
        self.validations.append((self.trainer.current_epoch, self.trainer.fit_loop.epoch_loop.batch_idx))

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.transfers += 1
        return batch


def test_step_fetching_two_batches_counts_step_calls_and_validates_at_the_end(tmp_path: Any) -> None:
    model = FetchesTwo()
    trainer = quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=0, limit_val_batches=1)
    trainer.fit(model, make_loader(n=64), make_loader())  # 8 batches: 4 step calls per epoch
    assert model.fetched == [(i, 0) for i in range(8)] * 2
    assert trainer.global_step == 8
    assert trainer.fit_loop.epoch_loop.batch_progress.total.completed == 8
    # before the step: the batch fetched last (None at the epoch's start); after it: the last one it fetched
    assert model.starts == [(None, 0), (8, 1), (8, 3), (8, 5)] * 2
    assert model.ends == [1, 3, 5, 7] * 2
    assert model.validations == [(0, 3), (1, 3)]
    # the step owns its batches: the loop moves nothing to the device for them (the val loop still does)
    assert model.transfers == 2


def test_int_val_check_interval_counts_step_calls(tmp_path: Any) -> None:
    model = FetchesTwo()
    trainer = quiet_trainer(tmp_path, num_sanity_val_steps=0, limit_val_batches=1, val_check_interval=2)
    trainer.fit(model, make_loader(n=64), make_loader())
    assert model.validations == [(0, 1), (0, 3)]


def test_gradient_accumulation_counts_step_calls(tmp_path: Any) -> None:
    model = FetchesTwo()
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_val_batches=0, accumulate_grad_batches=2)
    trainer.fit(model, make_loader(n=64))  # 4 step calls per epoch: an optimizer step after every second
    assert trainer.global_step == 4


def test_step_running_into_the_end_of_the_data_ends_the_epoch(tmp_path: Any) -> None:
    model = FetchesTwo()
    trainer = quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=0, limit_val_batches=1)
    trainer.fit(model, make_loader(n=40), make_loader())  # 5 batches: the third step finds only one
    assert model.fetched == [(i, 0) for i in range(5)] * 2
    assert model.ends == [1, 3] * 2  # the step that ran out returned nothing: no batch-end hooks
    assert trainer.global_step == 4  # nor an optimizer step
    assert [epoch for epoch, _ in model.validations] == [0, 1]  # but its epoch still validates


def test_epoch_schedulers_step_once_per_epoch_also_when_the_last_step_ran_out(tmp_path: Any) -> None:
    class Scheduled(FetchesTwo):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    for batches in (40, 64):  # the last step runs out of data, or fetches the last two batches exactly
        model = Scheduled()
        trainer = quiet_trainer(tmp_path, max_epochs=3, limit_val_batches=0)
        trainer.fit(model, make_loader(n=batches))
        assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**3)


def test_limit_train_batches_caps_what_the_step_can_fetch(tmp_path: Any) -> None:
    model = FetchesTwo(per_step=1)
    trainer = quiet_trainer(tmp_path, limit_train_batches=3, limit_val_batches=0)
    trainer.fit(model, make_loader(n=64))
    assert model.fetched == [(0, 0), (1, 0), (2, 0)]
    assert trainer.global_step == 3


class Stream(IterableDataset):
    """An iterable without a length: the loop only learns the end of the data when it arrives."""

    def __iter__(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        for _ in range(5):
            x = torch.randn(8, 4, generator=generator)
            yield x, (x[:, 0] > 0).long()


def test_unsized_data_ends_the_epoch_and_validates_when_it_runs_out(tmp_path: Any) -> None:
    model = FetchesTwo(per_step=1)
    trainer = quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=0, limit_val_batches=1)
    trainer.fit(model, DataLoader(Stream(), batch_size=None), make_loader())
    assert model.fetched == [(i, 0) for i in range(5)] * 2
    assert model.validations == [(0, 4), (1, 4)]


def test_self_log_infers_the_batch_size_from_the_fetched_batch(tmp_path: Any) -> None:
    class LogsBatchSize(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 2)

        def training_step(self, dataloader_iter: Any) -> torch.Tensor:
            (x, y), _, _ = next(dataloader_iter)
            self.log("size", float(len(x)), on_step=False, on_epoch=True)
            return nn.functional.cross_entropy(self.layer(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = quiet_trainer(tmp_path)
    trainer.fit(LogsBatchSize(), make_loader(n=10, batch_size=8))  # batches of 8 and 2
    assert trainer.callback_metrics["size"].item() == pytest.approx((8 * 8 + 2 * 2) / 10)


def test_manual_optimization_with_dataloader_iter(tmp_path: Any) -> None:
    class Manual(TinyModel):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
            optimizer = self.optimizers()
            (x, y), _, _ = next(dataloader_iter)
            optimizer.zero_grad()
            self.manual_backward(nn.functional.cross_entropy(self(x), y))
            optimizer.step()

    model = Manual()
    before = model.layer.weight.detach().clone()
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    trainer.fit(model, make_loader())
    assert trainer.global_step == 8
    assert not torch.equal(before, model.layer.weight)


class EvalFetching(TinyModel):
    """Validation, test and predict steps that fetch their own batches, recording what they fetched."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched: dict[str, list[tuple[int, int]]] = {"validation": [], "test": [], "predict": []}
        self.val_ends: list[tuple[int, int]] = []

    def _next(self, kind: str, dataloader_iter: Any) -> tuple[torch.Tensor, torch.Tensor]:
        batch, batch_idx, dataloader_idx = next(dataloader_iter)
        self.fetched[kind].append((batch_idx, dataloader_idx))
        return batch[0], batch[1]

    def validation_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
        x, y = self._next("validation", dataloader_iter)
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.val_ends.append((batch_idx, dataloader_idx))

    def test_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
        x, y = self._next("test", dataloader_iter)
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def predict_step(self, dataloader_iter: Any) -> torch.Tensor:  # type: ignore[override]
        x, _ = self._next("predict", dataloader_iter)
        return self(x).argmax(1)


def test_eval_steps_fetch_every_loader_in_turn(tmp_path: Any) -> None:
    model = EvalFetching()
    trainer = quiet_trainer(tmp_path)
    two_loaders = [make_loader(n=16), make_loader(n=24, seed=1)]  # 2 and 3 batches
    results = trainer.validate(model, two_loaders, verbose=False)
    expected = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]
    assert model.fetched["validation"] == expected
    assert model.val_ends == expected
    assert set(results[0]) == {"val_loss/dataloader_idx_0"} and set(results[1]) == {"val_loss/dataloader_idx_1"}
    assert trainer.validate_loop.batch_progress.current.completed == 5

    assert "test_acc" in trainer.test(model, make_loader(), verbose=False)[0]
    assert model.fetched["test"] == [(i, 0) for i in range(4)]

    predictions = trainer.predict(model, two_loaders)
    assert model.fetched["predict"] == expected
    assert [len(per_loader) for per_loader in predictions] == [2, 3]


def test_sanity_check_caps_what_the_validation_step_can_fetch(tmp_path: Any) -> None:
    model = EvalFetching()
    quiet_trainer(tmp_path, limit_train_batches=1, limit_val_batches=3, num_sanity_val_steps=2).fit(
        model, make_loader(), make_loader()
    )
    assert model.fetched["validation"] == [(0, 0), (1, 0), (0, 0), (1, 0), (2, 0)]


def test_mid_epoch_resume_continues_at_the_next_batch_the_step_has_not_fetched(tmp_path: Any) -> None:
    def shuffled() -> DataLoader:
        return DataLoader(make_loader(n=64).dataset, batch_size=8, shuffle=True)

    torch.manual_seed(0)
    uninterrupted = FetchesTwo()
    quiet_trainer(tmp_path / "full", max_epochs=2, limit_val_batches=0).fit(uninterrupted, shuffled())

    torch.manual_seed(0)
    first = FetchesTwo()
    saves = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=3, save_top_k=-1)
    trainer = quiet_trainer(tmp_path, max_epochs=2, limit_val_batches=0, enable_checkpointing=True, callbacks=[saves])
    trainer.fit(first, shuffled())
    resumed = FetchesTwo()
    # saved after the second step of epoch 1: the step had fetched four batches of that epoch
    saves_again = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=3, save_top_k=-1)
    trainer = quiet_trainer(
        tmp_path, max_epochs=2, limit_val_batches=0, enable_checkpointing=True, callbacks=[saves_again]
    )
    with pytest.warns(UserWarning, match="exists and is not empty"):
        trainer.fit(resumed, shuffled(), ckpt_path=tmp_path / "ckpts" / "epoch=1-step=6.ckpt")
    assert resumed.fetched == [(4, 0), (5, 0), (6, 0), (7, 0)]
    assert resumed.ends == [5, 7]
    for name, value in uninterrupted.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name
