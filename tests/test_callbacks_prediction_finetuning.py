"""BasePredictionWriter, BaseFinetuning and BackboneFinetuning through the real Trainer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import MemoryLogger, TinyModel, make_loader, quiet_trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L
from stages.exceptions import MisconfigurationException

# ---- BasePredictionWriter -----------------------------------------------------------------------------------


class Recorder(L.BasePredictionWriter):
    def __init__(self, write_interval: str) -> None:
        super().__init__(write_interval)
        self.batches: list[tuple[Any, list[int] | None, list[int], int, int]] = []
        self.epochs: list[tuple[Any, Any]] = []

    def write_on_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        self.batches.append((prediction, batch_indices, batch[1].tolist(), batch_idx, dataloader_idx))

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        self.epochs.append((predictions, batch_indices))


class MultiLoaderModel(TinyModel):
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0]).argmax(1)


def _indexed_loader(n: int, shuffle: bool) -> DataLoader:
    """Features plus each sample's own dataset index, so a batch says which indices it holds."""
    data = TensorDataset(torch.randn(n, 4), torch.arange(n))
    return DataLoader(data, batch_size=3, shuffle=shuffle, generator=torch.Generator().manual_seed(3))


def test_batch_writer_gets_each_batch_with_its_dataset_indices(tmp_path: Any) -> None:
    writer = Recorder("batch")
    trainer = quiet_trainer(tmp_path, callbacks=[writer])
    returned = trainer.predict(TinyModel(), _indexed_loader(7, shuffle=True))
    assert [entry[3] for entry in writer.batches] == [0, 1, 2]
    for _, indices, held, _, dataloader_idx in writer.batches:
        assert indices == held  # the indices of the shuffled samples this batch really holds
        assert dataloader_idx == 0
    assert sorted(i for entry in writer.batches for i in entry[1]) == list(range(7))
    assert [entry[0] for entry in writer.batches] == returned
    assert writer.epochs == []


def test_epoch_writer_gets_all_predictions_and_indices_even_without_return(tmp_path: Any) -> None:
    writer = Recorder("epoch")
    trainer = quiet_trainer(tmp_path, callbacks=[writer])
    loaders = [_indexed_loader(4, shuffle=False), _indexed_loader(5, shuffle=False)]
    assert trainer.predict(MultiLoaderModel(), loaders, return_predictions=False) is None
    assert writer.batches == []
    ((predictions, indices),) = writer.epochs
    assert indices == [[[0, 1, 2], [3]], [[0, 1, 2], [3, 4]]]
    assert [[p.shape[0] for p in loader] for loader in predictions] == [[3, 1], [3, 2]]


def test_batch_and_epoch_writer_uses_both(tmp_path: Any) -> None:
    writer = Recorder("batch_and_epoch")
    quiet_trainer(tmp_path, callbacks=[writer]).predict(TinyModel(), _indexed_loader(4, shuffle=False))
    assert [entry[1] for entry in writer.batches] == [[0, 1, 2], [3]]
    ((predictions, indices),) = writer.epochs
    assert indices == [[[0, 1, 2], [3]]]
    assert len(predictions) == 2  # one loader: the list of its batch predictions


def test_batch_indices_are_none_without_a_batch_sampler(tmp_path: Any) -> None:
    writer = Recorder("batch")
    unbatched = DataLoader(TensorDataset(torch.randn(2, 1, 4), torch.arange(2).view(2, 1)), batch_size=None)
    quiet_trainer(tmp_path, callbacks=[writer]).predict(TinyModel(), unbatched)
    assert [(entry[1], entry[2]) for entry in writer.batches] == [(None, [0]), (None, [1])]


def test_prediction_writer_refuses_a_bad_interval_and_unimplemented_writes(tmp_path: Any) -> None:
    with pytest.raises(MisconfigurationException, match="'step'"):
        L.BasePredictionWriter("step")
    with pytest.raises(NotImplementedError, match="write_on_batch_end"):
        quiet_trainer(tmp_path, callbacks=[L.BasePredictionWriter()]).predict(TinyModel(), make_loader())


# ---- BaseFinetuning / BackboneFinetuning --------------------------------------------------------------------


class BackboneModel(L.LightningModule):
    def __init__(self, batch_norm: bool = False) -> None:
        super().__init__()
        norm = nn.BatchNorm1d(8) if batch_norm else nn.Identity()
        self.backbone = nn.Sequential(nn.Linear(4, 8), norm, nn.ReLU())
        self.head = nn.Linear(8, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1)


class GroupWatcher(L.Callback):
    """After the fine-tuning callback at each epoch start: every group's lr and whether the backbone trains."""

    def __init__(self) -> None:
        self.lrs: list[list[float]] = []
        self.backbone_trains: list[bool] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.lrs.append([round(group["lr"], 10) for group in trainer.optimizers[0].param_groups])
        self.backbone_trains.append(pl_module.backbone[0].weight.requires_grad)


def test_backbone_finetuning_unfreezes_and_ramps_the_backbone_lr(tmp_path: Any) -> None:
    watcher = GroupWatcher()
    finetuning = L.BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    model = BackboneModel()
    initial = model.backbone[0].weight.detach().clone()
    first_epoch_weights: list[torch.Tensor] = []
    snapshot = L.LambdaCallback(
        on_train_epoch_end=lambda t, m: first_epoch_weights.append(m.backbone[0].weight.detach().clone())
    )
    trainer = quiet_trainer(tmp_path, max_epochs=6, callbacks=[finetuning, watcher, snapshot])
    trainer.fit(model, make_loader())
    assert watcher.backbone_trains == [False, True, True, True, True, True]
    assert torch.equal(first_epoch_weights[0], initial)  # frozen during epoch 0
    assert not torch.equal(first_epoch_weights[1], initial)
    # unfrozen at 0.1 * 0.1, then doubled each epoch until aligned with the head's lr
    assert watcher.lrs == [[0.1], [0.1, 0.01], [0.1, 0.02], [0.1, 0.04], [0.1, 0.08], [0.1, 0.1]]
    state = finetuning.state_dict()
    assert state["previous_backbone_lr"] == pytest.approx(0.1)
    head, backbone = state["internal_optimizer_metadata"][0]
    assert head["params"] == ["head.weight", "head.bias"]
    assert backbone["params"] == ["backbone.0.weight", "backbone.0.bias"]
    assert backbone["lr"] == pytest.approx(0.01)


def test_backbone_finetuning_resume_rebuilds_the_added_group(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[L.BackboneFinetuning(unfreeze_backbone_at_epoch=1)])
    trainer.fit(BackboneModel(), make_loader())
    trainer.save_checkpoint(tmp_path / "ft.ckpt")
    watcher = GroupWatcher()
    resumed = quiet_trainer(
        tmp_path, max_epochs=4, callbacks=[L.BackboneFinetuning(unfreeze_backbone_at_epoch=1), watcher]
    )
    resumed.fit(BackboneModel(), make_loader(), ckpt_path=tmp_path / "ft.ckpt")
    # the backbone group exists again, its lr carried on from the checkpoint (0.02 doubled)
    assert watcher.lrs == [[0.1, 0.04]]


def test_backbone_finetuning_resumed_run_trains_like_an_uninterrupted_one(tmp_path: Any) -> None:
    def run(max_epochs: int, ckpt_path: Any = None) -> BackboneModel:
        torch.manual_seed(0)
        model = BackboneModel()
        finetuning = L.BackboneFinetuning(unfreeze_backbone_at_epoch=1)
        trainer = quiet_trainer(tmp_path, max_epochs=max_epochs, callbacks=[finetuning])
        trainer.fit(model, make_loader(), ckpt_path=ckpt_path)
        if ckpt_path is None:
            trainer.save_checkpoint(tmp_path / f"after-{max_epochs}.ckpt")
        return model

    uninterrupted = run(4)
    run(2)
    resumed = run(4, tmp_path / "after-2.ckpt")
    assert resumed.backbone[0].weight.requires_grad
    for theirs, ours in zip(uninterrupted.parameters(), resumed.parameters()):
        assert torch.allclose(theirs, ours, atol=1e-6)


def test_backbone_finetuning_explicit_lr_and_lambda(tmp_path: Any) -> None:
    watcher = GroupWatcher()
    finetuning = L.BackboneFinetuning(
        unfreeze_backbone_at_epoch=0, backbone_initial_lr=0.5, lambda_func=lambda epoch: 0.5, should_align=False
    )
    quiet_trainer(tmp_path, max_epochs=3, callbacks=[finetuning, watcher]).fit(BackboneModel(), make_loader())
    assert watcher.lrs == [[0.1, 0.5], [0.1, 0.25], [0.1, 0.125]]


def test_backbone_finetuning_needs_a_backbone(tmp_path: Any) -> None:
    trainer = quiet_trainer(tmp_path, callbacks=[L.BackboneFinetuning()])
    with pytest.raises(MisconfigurationException, match="backbone"):
        trainer.fit(TinyModel(), make_loader())


def test_lr_monitor_follows_a_group_added_by_finetuning(tmp_path: Any) -> None:
    logger = MemoryLogger()
    monitor = L.LearningRateMonitor(logging_interval="epoch")
    finetuning = L.BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    trainer = quiet_trainer(tmp_path, max_epochs=2, logger=logger, log_every_n_steps=1, callbacks=[finetuning, monitor])
    trainer.fit(BackboneModel(), make_loader())
    assert logger.series("lr-SGD") == [(0, 0.1)]
    assert logger.series("lr-SGD/pg1") == [(4, 0.1)]
    assert logger.series("lr-SGD/pg2") == [(4, pytest.approx(0.01))]
    assert monitor.lrs["lr-SGD/pg1"] == [0.1, 0.1]


class HeadOnly(L.BaseFinetuning):
    """Freeze the backbone without BatchNorm; at epoch 1 add it back at the default lr / initial_denom_lr."""

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone, train_bn=False)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        if epoch == 1:
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, initial_denom_lr=4.0)


def test_base_finetuning_subclass_freeze_and_unfreeze(tmp_path: Any) -> None:
    watcher = GroupWatcher()
    model = BackboneModel(batch_norm=True)
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[HeadOnly(), watcher])
    trainer.fit(model, make_loader())
    assert watcher.lrs == [[0.1], [0.1, 0.025]]
    added = trainer.optimizers[0].param_groups[1]["params"]
    assert {id(p) for p in added} == {id(p) for p in model.backbone.parameters()}  # BatchNorm unfrozen too


def test_backbone_finetuning_keeps_batch_norm_trainable_by_default(tmp_path: Any) -> None:
    model = BackboneModel(batch_norm=True)
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[L.BackboneFinetuning(unfreeze_backbone_at_epoch=1)])
    # BatchNorm trained from the start, so it is in the optimizer already when the backbone is unfrozen
    with pytest.warns(UserWarning, match="2 of the parameters to unfreeze are already in an optimizer group"):
        trainer.fit(model, make_loader())
    first, second = trainer.optimizers[0].param_groups
    assert {id(p) for p in second["params"]} == {id(model.backbone[0].weight), id(model.backbone[0].bias)}
    assert any(p is model.backbone[1].weight for p in first["params"])


def test_base_finetuning_static_helpers() -> None:
    model = BackboneModel(batch_norm=True)
    L.BaseFinetuning.freeze(model.backbone, train_bn=False)
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert model.backbone[1].track_running_stats is False
    frozen = list(L.BaseFinetuning.filter_params(model, requires_grad=False))
    assert {id(p) for p in frozen} == {id(p) for p in model.backbone.parameters()}
    L.BaseFinetuning.make_trainable(model.backbone)
    assert all(p.requires_grad for p in model.backbone.parameters())
    assert len(L.BaseFinetuning.flatten_modules(model)) == 4  # Linear, BatchNorm, ReLU, Linear
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="already in an optimizer group"):
        L.BaseFinetuning.unfreeze_and_add_param_group(model.backbone, optimizer)
    assert len(optimizer.param_groups) == 1
