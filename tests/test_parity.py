"""Numerical parity: our Trainer against a hand-written PyTorch loop making the same calls in the same order.

Each test builds the same network from a fixed seed, trains it once with `statemachine.Trainer` and once with a
plain loop written from Lightning's documented batch order, reseeding the global RNG right before each run,
and asserts that the final parameters are equal bit for bit (`torch.equal`) and that `global_step` matches the
loop's count of optimizer steps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import ExponentialLR, LRScheduler, StepLR
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L

BATCH_SIZE = 4
INIT_SEED = 1234
RUN_SEED = 99


# ---- shared pieces ------------------------------------------------------------------------------------------


def make_net(dropout: float = 0.0) -> nn.Sequential:
    """The network, always with the same initial weights."""
    torch.manual_seed(INIT_SEED)
    layers: list[nn.Module] = [nn.Linear(6, 16), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(16, 3))
    return nn.Sequential(*layers)


def make_dataset(num_batches: int, seed: int = 7) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_batches * BATCH_SIZE, 6, generator=generator)
    y = torch.randint(0, 3, (num_batches * BATCH_SIZE,), generator=generator)
    return TensorDataset(x, y)


def make_loader(num_batches: int, seed: int = 7, generator: torch.Generator | None = None) -> DataLoader:
    """No shuffling. Without `generator`, every `iter()` draws its base seed from the global torch RNG."""
    return DataLoader(make_dataset(num_batches, seed), batch_size=BATCH_SIZE, shuffle=False, generator=generator)


def batch_loss(net: nn.Module, batch: list[Tensor]) -> Tensor:
    x, y = batch
    return nn.functional.cross_entropy(net(x), y)


def trainer_for(tmp_path: Path, **flags: Any) -> L.Trainer:
    return L.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **flags,
    )


def assert_same_parameters(trained: nn.Module, reference: nn.Module) -> None:
    ours = dict(trained.named_parameters())
    theirs = dict(reference.named_parameters())
    assert ours.keys() == theirs.keys()
    assert ours, "the model has no parameters"
    for name, param in ours.items():
        expected = theirs[name]
        assert torch.equal(param.detach(), expected.detach()), (
            f"{name} differs: max abs diff {(param.detach() - expected.detach()).abs().max().item():.3e}"
        )


def assert_moved(trained: nn.Module) -> None:
    """Guard against a vacuous pass: training must have changed the initial weights."""
    initial = make_net(dropout=0.5 if any(isinstance(m, nn.Dropout) for m in trained.modules()) else 0.0)
    assert not all(torch.equal(a, b) for a, b in zip(trained.parameters(), initial.parameters()))


class TrainOnly(L.LightningModule):
    """Automatic optimization, no validation; `configure` builds what `configure_optimizers` returns."""

    def __init__(
        self,
        configure: Callable[[nn.Module], Any],
        train_loader: DataLoader,
        dropout: float = 0.0,
        loss_fn: Callable[[nn.Module, list[Tensor]], Tensor] = batch_loss,
    ) -> None:
        super().__init__()
        self.net = make_net(dropout)
        self._configure = configure
        self._train_loader = train_loader
        self._loss_fn = loss_fn

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        return self._loss_fn(self.net, batch)

    def configure_optimizers(self) -> Any:
        return self._configure(self.net)

    def train_dataloader(self) -> DataLoader:
        return self._train_loader


class WithValidation(TrainOnly):
    def __init__(
        self, configure: Callable[[nn.Module], Any], train_loader: DataLoader, val_loader: DataLoader, dropout: float
    ) -> None:
        super().__init__(configure, train_loader, dropout=dropout)
        self._val_loader = val_loader
        self.val_batches_seen = 0

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        self.val_batches_seen += 1
        return batch_loss(self.net, batch)

    def val_dataloader(self) -> DataLoader:
        return self._val_loader


# ---- (a) plain SGD, 2 epochs --------------------------------------------------------------------------------


def test_parity_plain_sgd_two_epochs(tmp_path: Path) -> None:
    num_batches, epochs = 5, 2

    def configure(net: nn.Module) -> Optimizer:
        return torch.optim.SGD(net.parameters(), lr=0.1)

    model = TrainOnly(configure, make_loader(num_batches))
    trainer = trainer_for(tmp_path, max_epochs=epochs)
    torch.manual_seed(RUN_SEED)
    trainer.fit(model)

    net = make_net()
    optimizer = configure(net)
    loader = make_loader(num_batches)
    torch.manual_seed(RUN_SEED)
    steps = 0
    for _ in range(epochs):
        for batch in loader:
            loss = batch_loss(net, batch)  # training_step
            optimizer.zero_grad()  # after training_step, before backward
            loss.backward()
            optimizer.step()
            steps += 1

    assert_moved(model.net)
    assert_same_parameters(model.net, net)
    assert trainer.global_step == steps == num_batches * epochs


# ---- (b) accumulation with norm clipping, short last window ---------------------------------------------


def grad_probing_loss(net: nn.Module, batch: list[Tensor]) -> Tensor:
    """The loss, scaled by 1.5 while gradients from an earlier backward are still held.

    This makes the position of `zero_grad` observable: it must come after `training_step` on a window's first
    batch, so that batch still sees the previous window's gradients.
    """
    holds_grads = any(p.grad is not None for p in net.parameters())
    return batch_loss(net, batch) * (1.5 if holds_grads else 1.0)


def test_parity_accumulation_and_clipping(tmp_path: Path) -> None:
    num_batches, epochs, k, clip = 7, 2, 3, 0.5

    def configure(net: nn.Module) -> Optimizer:
        return torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)

    model = TrainOnly(configure, make_loader(num_batches), loss_fn=grad_probing_loss)
    trainer = trainer_for(
        tmp_path, max_epochs=epochs, accumulate_grad_batches=k, gradient_clip_val=clip, gradient_clip_algorithm="norm"
    )
    torch.manual_seed(RUN_SEED)
    trainer.fit(model)

    net = make_net()
    optimizer = configure(net)
    loader = make_loader(num_batches)
    torch.manual_seed(RUN_SEED)
    steps = 0
    zeroed_at: list[int] = []
    stepped_at: list[int] = []
    clipped_norms: list[float] = []
    for _ in range(epochs):
        for batch_idx, batch in enumerate(loader):
            is_last = batch_idx == len(loader) - 1
            loss = grad_probing_loss(net, batch)  # training_step
            if batch_idx % k == 0:
                optimizer.zero_grad()
                zeroed_at.append(batch_idx)
            (loss / k).backward()  # always divided by k, even in the short last window
            if (batch_idx + 1) % k == 0 or is_last:
                params = [p for group in optimizer.param_groups for p in group["params"]]
                clipped_norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))
                optimizer.step()
                stepped_at.append(batch_idx)
                steps += 1

    assert zeroed_at == [0, 3, 6] * epochs
    assert stepped_at == [2, 5, 6] * epochs
    assert max(clipped_norms) > clip, "clipping never engaged: the test would not notice a missing clip"
    assert_moved(model.net)
    assert_same_parameters(model.net, net)
    assert trainer.global_step == steps == 3 * epochs


# ---- (c) a step-interval scheduler (frequency 2) and an epoch scheduler ----------------------------------


class RecordsLR(TrainOnly):
    """Records the learning rate each training batch runs with."""

    def __init__(self, configure: Callable[[nn.Module], Any], train_loader: DataLoader) -> None:
        super().__init__(configure, train_loader)
        self.lrs: list[float] = []

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        self.lrs.append(self.optimizers().param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("num_batches", [7, 8], ids=["odd-epoch", "even-epoch"])
def test_parity_step_and_epoch_schedulers(tmp_path: Path, num_batches: int) -> None:
    """7 batches: the frequency counts `batch_idx+1` in the epoch, not `global_step` (epoch 1 steps at 9, 11, 13).

    8 batches: on the last batch the step scheduler steps before the epoch one. The learning rates are python
    floats rounded in that order (epoch 1 runs with 0.3*0.7**4*0.9, not 0.3*0.7**3*0.9*0.7), which float32
    parameters may not show, so the per-batch learning rates are compared too.
    """
    epochs = 3

    def build(net: nn.Module) -> tuple[Optimizer, LRScheduler, LRScheduler]:
        optimizer = torch.optim.SGD(net.parameters(), lr=0.3)
        return optimizer, StepLR(optimizer, step_size=1, gamma=0.7), ExponentialLR(optimizer, gamma=0.9)

    def configure(net: nn.Module) -> Any:
        optimizer, per_step, per_epoch = build(net)
        return [optimizer], [
            {"scheduler": per_step, "interval": "step", "frequency": 2},
            {"scheduler": per_epoch, "interval": "epoch"},
        ]

    model = RecordsLR(configure, make_loader(num_batches))
    trainer = trainer_for(tmp_path, max_epochs=epochs)
    torch.manual_seed(RUN_SEED)
    trainer.fit(model)

    net = make_net()
    optimizer, per_step, per_epoch = build(net)
    loader = make_loader(num_batches)
    torch.manual_seed(RUN_SEED)
    steps = 0
    lrs: list[float] = []
    for _ in range(epochs):
        for batch_idx, batch in enumerate(loader):
            lrs.append(optimizer.param_groups[0]["lr"])
            loss = batch_loss(net, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if (batch_idx + 1) % 2 == 0:  # the index in the epoch, not global_step
                per_step.step()
            if batch_idx == len(loader) - 1:
                per_epoch.step()

    assert_moved(model.net)
    assert_same_parameters(model.net, net)
    assert trainer.optimizers[0].param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    assert len(set(lrs)) > epochs, "the learning rate should change within epochs"
    assert model.lrs == lrs
    assert trainer.global_step == steps == num_batches * epochs


# ---- (d) manual optimization with two optimizers ---------------------------------------------------------


class TwoNets(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = make_net()
        torch.manual_seed(INIT_SEED + 1)
        self.head = nn.Linear(3, 3)


def manual_losses(nets: TwoNets, batch: list[Tensor]) -> tuple[Tensor, Callable[[], Tensor]]:
    """The encoder's loss, and a callable for the head's loss, computed after the encoder's update."""
    x, y = batch

    def head_loss() -> Tensor:
        features = nets.encoder(x).detach()
        return nn.functional.cross_entropy(nets.head(features), y)

    return batch_loss(nets.encoder, batch), head_loss


def build_manual_optimizers(nets: TwoNets) -> list[Optimizer]:
    return [
        torch.optim.SGD(nets.encoder.parameters(), lr=0.1, momentum=0.5),
        torch.optim.Adam(nets.head.parameters(), lr=0.01),
    ]


class ManualModule(L.LightningModule):
    def __init__(self, train_loader: DataLoader) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.nets = TwoNets()
        self._train_loader = train_loader

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        opt_encoder, opt_head = self.optimizers()
        encoder_loss, head_loss = manual_losses(self.nets, batch)
        opt_encoder.zero_grad()
        self.manual_backward(encoder_loss)
        opt_encoder.step()
        loss = head_loss()
        opt_head.zero_grad()
        self.manual_backward(loss)
        opt_head.step()
        return encoder_loss.detach() + loss.detach()

    def configure_optimizers(self) -> list[Optimizer]:
        return build_manual_optimizers(self.nets)

    def train_dataloader(self) -> DataLoader:
        return self._train_loader


def test_parity_manual_optimization_two_optimizers(tmp_path: Path) -> None:
    num_batches, epochs = 5, 2
    model = ManualModule(make_loader(num_batches))
    trainer = trainer_for(tmp_path, max_epochs=epochs)
    torch.manual_seed(RUN_SEED)
    trainer.fit(model)

    nets = TwoNets()
    opt_encoder, opt_head = build_manual_optimizers(nets)
    loader = make_loader(num_batches)
    torch.manual_seed(RUN_SEED)
    steps = 0
    for _ in range(epochs):
        for batch in loader:
            encoder_loss, head_loss = manual_losses(nets, batch)
            opt_encoder.zero_grad()
            encoder_loss.backward()
            opt_encoder.step()
            loss = head_loss()
            opt_head.zero_grad()
            loss.backward()
            opt_head.step()
            steps += 2

    assert_same_parameters(model.nets, nets)
    assert not torch.equal(model.nets.head.weight, TwoNets().head.weight)
    # in manual optimization every optimizer's step counts
    assert trainer.global_step == steps == 2 * num_batches * epochs


# ---- (e) val_check_interval=0.25 with validation, dropout, sanity check -------------------------------------


def _validate(net: nn.Module, loader: DataLoader) -> None:
    """What a validation run does to the state a later training batch sees."""
    net.eval()
    with torch.no_grad():
        for batch in loader:
            batch_loss(net, batch)
    net.train()
    net.zero_grad()  # on_validation_model_zero_grad, after a batch that stepped


def _seeded_generator() -> torch.Generator:
    return torch.Generator().manual_seed(5)


@pytest.mark.parametrize("val_rng", ["global", "own"])
def test_parity_validation_dropout_and_sanity_check(tmp_path: Path, val_rng: str) -> None:
    """8 batches, val_check_interval=0.25: validation after batches 2, 4, 6, 8 of each epoch, plus a sanity check.

    "global": the val loader draws its base seed from the global RNG on every `iter()`, so each in-fit validation
    consumes one draw; the plain loop iterates it at the same points, but has no sanity check: the trainer must
    leave the RNG of training (dropout) as if the sanity check had not run.
    "own": the val loader has its own generator, so validation must not change anything: the plain loop does
    not validate at all.
    """
    num_batches, epochs, val_batches = 8, 2, 3
    dropout = 0.5

    def configure(net: nn.Module) -> Optimizer:
        return torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)

    def val_loader() -> DataLoader:
        generator = _seeded_generator() if val_rng == "own" else None
        return make_loader(val_batches, seed=11, generator=generator)

    model = WithValidation(configure, make_loader(num_batches), val_loader(), dropout=dropout)
    trainer = trainer_for(tmp_path, max_epochs=epochs, val_check_interval=0.25, num_sanity_val_steps=2)
    torch.manual_seed(RUN_SEED)
    trainer.fit(model)
    # 2 sanity batches, then 4 validations of 3 batches per epoch
    assert model.val_batches_seen == 2 + 4 * val_batches * epochs

    net = make_net(dropout)
    optimizer = configure(net)
    loader = make_loader(num_batches)
    plain_val_loader = val_loader()
    torch.manual_seed(RUN_SEED)
    steps = 0
    validations = 0
    for _ in range(epochs):
        for batch_idx, batch in enumerate(loader):
            loss = batch_loss(net, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if (batch_idx + 1) % 2 == 0:
                validations += 1
                if val_rng == "global":
                    _validate(net, plain_val_loader)

    assert validations == 4 * epochs
    assert_moved(model.net)
    assert_same_parameters(model.net, net)
    assert trainer.global_step == steps == num_batches * epochs
    assert model.net.training, "validation must restore train mode"


def test_dropout_parity_is_sensitive_to_the_rng(tmp_path: Path) -> None:
    """Control for (e): one extra global draw before training changes the dropout masks and the result."""
    num_batches = 4

    def configure(net: nn.Module) -> Optimizer:
        return torch.optim.SGD(net.parameters(), lr=0.2)

    results: list[list[Tensor]] = []
    for extra_draws in (0, 1):
        model = TrainOnly(configure, make_loader(num_batches), dropout=0.5)
        trainer = trainer_for(tmp_path, max_epochs=1)
        torch.manual_seed(RUN_SEED)
        torch.rand(extra_draws)
        trainer.fit(model)
        results.append([p.detach().clone() for p in model.net.parameters()])
    assert not all(torch.equal(a, b) for a, b in zip(*results))


def test_loader_iteration_draws_from_the_global_rng() -> None:
    """Control for (e) "global": `iter()` on a loader without a generator consumes the global RNG."""
    torch.manual_seed(RUN_SEED)
    untouched = torch.rand(1)
    torch.manual_seed(RUN_SEED)
    next(iter(make_loader(1)))
    assert not torch.equal(torch.rand(1), untouched)
    torch.manual_seed(RUN_SEED)
    next(iter(make_loader(1, generator=_seeded_generator())))
    assert torch.equal(torch.rand(1), untouched)
