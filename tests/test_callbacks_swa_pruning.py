"""StochasticWeightAveraging and ModelPruning through the real Trainer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer
from torch import nn
from torch.nn.utils import prune
from torch.optim.swa_utils import SWALR

import statemachine as L
from stages.exceptions import MisconfigurationException


class WeightWatcher(L.Callback):
    """The layer's weights and the lr at each training epoch start."""

    def __init__(self) -> None:
        self.weights: list[torch.Tensor] = []
        self.lrs: list[float] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.weights.append(pl_module.layer.weight.detach().clone())
        self.lrs.append(round(trainer.optimizers[0].param_groups[0]["lr"], 10))


# ---- StochasticWeightAveraging ------------------------------------------------------------------------------


def test_swa_final_weights_are_the_average_of_the_window(tmp_path: Any) -> None:
    watcher = WeightWatcher()
    swa = L.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2, annealing_epochs=1, annealing_strategy="linear")
    model = TinyModel()
    trainer = quiet_trainer(tmp_path, max_epochs=4, callbacks=[watcher, swa])
    trainer.fit(model, make_loader())
    # averaged at the starts of epochs 1, 2 and 3 (swa_epoch_start counts from 1), then copied into the model
    expected = torch.stack(watcher.weights[1:4]).mean(0)
    assert torch.allclose(model.layer.weight, expected, atol=1e-6)
    assert swa.n_averaged.item() == 3
    # SWALR took over at epoch 1 and reached swa_lrs after annealing_epochs=1 epoch
    assert watcher.lrs == [0.1, 0.1, 0.05, 0.05]
    assert isinstance(trainer.lr_scheduler_configs[0].scheduler, SWALR)


def test_swa_fractional_start_and_custom_average(tmp_path: Any) -> None:
    watcher = WeightWatcher()
    # keep the newest weights instead of a mean: the model ends with the weights of the last window start
    swa = L.StochasticWeightAveraging(swa_lrs=[0.05], swa_epoch_start=0.5, avg_fn=lambda avg, new, n: new)
    model = TinyModel()
    quiet_trainer(tmp_path, max_epochs=4, callbacks=[watcher, swa]).fit(model, make_loader())
    assert swa.swa_start == 1  # int(4 * 0.5) = epoch 2 counted from 1
    assert torch.equal(model.layer.weight.detach(), watcher.weights[3])


class NormModel(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.layer(x))


def test_swa_recomputes_batch_norm_statistics_for_the_averaged_weights(tmp_path: Any) -> None:
    swa = L.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2)
    model = NormModel()
    loader = make_loader()
    quiet_trainer(tmp_path, max_epochs=3, callbacks=[swa]).fit(model, loader)
    with torch.no_grad():
        activations = [model.layer(x) for x, _ in loader]
    # momentum None during the pass: the running mean is the plain average of the batch means
    expected_mean = torch.stack([a.mean(0) for a in activations]).mean(0)
    expected_var = torch.stack([a.var(0) for a in activations]).mean(0)
    assert torch.allclose(model.norm.running_mean, expected_mean, atol=1e-5)
    assert torch.allclose(model.norm.running_var, expected_var, atol=1e-5)
    assert model.norm.momentum == 0.1  # restored after the pass


class NormModelWithoutBatchIdx(NormModel):
    def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]  # Lightning allows it
        return super().training_step(batch, 0)


def test_swa_batch_norm_pass_calls_the_step_as_the_loop_does(tmp_path: Any) -> None:
    """A `training_step` without `batch_idx` runs in the loop, so it runs in SWA's BatchNorm pass too."""
    model = NormModelWithoutBatchIdx()
    swa = L.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1)
    quiet_trainer(tmp_path, max_epochs=2, callbacks=[swa]).fit(model, make_loader())
    assert model.norm.num_batches_tracked > 0


def test_swa_state_dict_round_trip(tmp_path: Any) -> None:
    swa = L.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1)
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[swa])
    trainer.fit(TinyModel(), make_loader())
    state = swa.state_dict()
    assert state["n_averaged"] == 2
    assert state["latest_update_epoch"] == 1
    assert set(state["average_model_state"]) == {"layer.weight", "layer.bias"}
    assert state["scheduler_state"]["anneal_epochs"] == 10


def test_swa_resumed_from_a_checkpoint_ends_with_the_same_average(tmp_path: Any) -> None:
    def run(ckpt_path: Any = None) -> torch.Tensor:
        torch.manual_seed(0)
        model = TinyModel()
        swa = L.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2)
        save_at_epoch_1 = L.LambdaCallback(
            on_train_epoch_end=lambda t, m: (
                t.save_checkpoint(tmp_path / "epoch1.ckpt") if t.current_epoch == 1 else None
            )
        )
        trainer = quiet_trainer(tmp_path, max_epochs=4, callbacks=[swa, save_at_epoch_1])
        trainer.fit(model, make_loader(), ckpt_path=ckpt_path)
        return model.layer.weight.detach().clone()

    uninterrupted = run()
    resumed = run(tmp_path / "epoch1.ckpt")  # the average holds 1 of the 3 epochs it will have
    assert torch.allclose(resumed, uninterrupted, atol=1e-6)


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"swa_lrs": -0.1}, "swa_lrs"),
        ({"swa_lrs": 1}, "swa_lrs"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 0}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 1.5}, "swa_epoch_start"),
        ({"swa_lrs": 0.1, "annealing_strategy": "step"}, "annealing_strategy"),
        ({"swa_lrs": 0.1, "avg_fn": 3}, "avg_fn"),
        ({"swa_lrs": 0.1, "device": 0}, "device"),
    ],
)
def test_swa_validates_its_arguments(arguments: dict[str, Any], match: str) -> None:
    with pytest.raises(MisconfigurationException, match=match):
        L.StochasticWeightAveraging(**arguments)


def test_swa_refuses_several_optimizers(tmp_path: Any) -> None:
    class Two(TinyModel):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            return None

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)]

    trainer = quiet_trainer(tmp_path, callbacks=[L.StochasticWeightAveraging(swa_lrs=0.1)])
    with pytest.raises(MisconfigurationException, match="1 optimizer"):
        trainer.fit(Two(), make_loader())


# ---- ModelPruning -------------------------------------------------------------------------------------------


def _zeros(module: nn.Module) -> int:
    return sum(int((p == 0).sum()) for p in module.parameters())


def test_global_pruning_prunes_the_amount_and_rewinds_to_the_initial_weights(tmp_path: Any) -> None:
    model = TinyModel()
    initial = {name: p.detach().clone() for name, p in model.named_parameters()}
    pruning = L.ModelPruning("l1_unstructured", amount=0.5)
    quiet_trainer(tmp_path, callbacks=[pruning]).fit(model, make_loader())
    # 8 weights + 2 biases, half of them pruned together; the masks are folded in when training ends
    assert _zeros(model.layer) == 5
    assert {name for name, _ in model.named_parameters()} == {"layer.weight", "layer.bias"}
    assert not hasattr(model.layer, "weight_mask")
    # lottery ticket: what survived holds its value from before training
    for name, param in model.named_parameters():
        kept = param != 0
        assert torch.equal(param[kept], initial[name][kept])


def test_local_structured_and_named_parameters(tmp_path: Any) -> None:
    model = TinyModel()
    pruning = L.ModelPruning(
        "ln_structured",
        parameter_names=["weight"],
        use_global_unstructured=False,
        amount=1,
        pruning_dim=0,
        pruning_norm=2,
        use_lottery_ticket_hypothesis=False,
    )
    quiet_trainer(tmp_path, callbacks=[pruning]).fit(model, make_loader())
    rows_zeroed = [bool((row == 0).all()) for row in model.layer.weight]
    assert sorted(rows_zeroed) == [False, True]  # one of the two output rows pruned
    assert _zeros(model.layer) == 4  # the bias untouched


def test_amount_as_a_function_of_the_epoch_and_permanent_checkpoint(tmp_path: Any) -> None:
    model = TinyModel()
    pruning = L.ModelPruning(
        "random_unstructured",
        amount=lambda epoch: 0.2 if epoch == 1 else 0,
        make_pruning_permanent=True,
        use_lottery_ticket_hypothesis=False,
    )
    checkpoint = L.ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", save_top_k=-1)
    trainer = quiet_trainer(tmp_path, max_epochs=3, enable_checkpointing=True, callbacks=[pruning, checkpoint])
    trainer.fit(model, make_loader())
    assert _zeros(model.layer) == 2  # 20% of 10, pruned once at the end of epoch 1
    epoch0 = torch.load(tmp_path / "epoch=0.ckpt", weights_only=False)["state_dict"]
    epoch1 = torch.load(tmp_path / "epoch=1.ckpt", weights_only=False)["state_dict"]
    assert set(epoch1) == {"layer.weight", "layer.bias"}  # masks folded into the saved weights
    assert sum(int((t == 0).sum()) for t in epoch0.values()) == 0
    assert sum(int((t == 0).sum()) for t in epoch1.values()) == 2


def test_pruning_on_validation_epoch_end(tmp_path: Any) -> None:
    model = TinyModel()
    seen: list[int] = []
    pruning = L.ModelPruning(
        "l1_unstructured", amount=0.3, prune_on_train_epoch_end=False, make_pruning_permanent=False
    )
    after_train = L.LambdaCallback(on_train_epoch_end=lambda t, m: seen.append(_zeros(m.layer)))
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[pruning, after_train])
    trainer.fit(model, make_loader(), make_loader())
    assert seen == [0]  # the sanity check did not prune; validation (after the epoch's end hooks) did
    assert int((model.layer.weight_mask == 0).sum() + (model.layer.bias_mask == 0).sum()) == 3


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"pruning_fn": "l3_unstructured"}, "pruning_fn"),
        ({"pruning_fn": "ln_structured", "pruning_dim": 0, "pruning_norm": 1}, "unstructured"),
        ({"pruning_fn": "random_structured", "use_global_unstructured": False}, "pruning_dim"),
        ({"pruning_fn": "ln_structured", "use_global_unstructured": False, "pruning_dim": 0}, "pruning_norm"),
        ({"pruning_fn": prune.L1Unstructured, "use_global_unstructured": False}, "global"),
        ({"pruning_fn": "l1_unstructured", "parameter_names": ["running_mean"]}, "parameter_names"),
        ({"pruning_fn": "l1_unstructured", "amount": "half"}, "amount"),
        ({"pruning_fn": "l1_unstructured", "verbose": 3}, "verbose"),
    ],
)
def test_pruning_validates_its_arguments(arguments: dict[str, Any], match: str) -> None:
    with pytest.raises(MisconfigurationException, match=match):
        L.ModelPruning(**arguments)


def test_pruning_refuses_parameters_outside_the_model(tmp_path: Any) -> None:
    pruning = L.ModelPruning("l1_unstructured", parameters_to_prune=[(nn.Linear(2, 2), "weight")])
    with pytest.raises(MisconfigurationException, match="not in the model"):
        quiet_trainer(tmp_path, callbacks=[pruning]).fit(TinyModel(), make_loader())
