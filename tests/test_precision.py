"""Precision: every Lightning precision value, autocast, true low/high precision, the gradient scaler, init_module."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import make_loader, quiet_trainer
from torch import Tensor, nn

import statemachine as L
from devices.checkpoint_io import load_checkpoint
from devices.transfer import convert_floating
from stages.exceptions import TrainerWarning
from statemachine.plugins import DoublePrecision, FSDPPrecision, HalfPrecision, MixedPrecision, Precision

ALLOWED = ("'64-true'", "'32-true'", "'16-mixed'", "'bf16-mixed'", "'16-true'", "'bf16-true'")


class Net(L.LightningModule):
    """A small MLP; records what its steps saw: input dtypes, parameter dtype, output dtype, default dtype."""

    def __init__(self, lr: float = 0.1, momentum: float = 0.9) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.lr, self.momentum = lr, momentum
        self.seen: dict[str, tuple[Any, ...]] = {}

    def loss(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        logits = self.net(x)
        self.seen["step"] = (x.dtype, y.dtype, self.net[0].weight.dtype, logits.dtype, torch.get_default_dtype())
        return nn.functional.cross_entropy(logits, y)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self.loss(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen["validation"] = (batch[0].dtype, self.net(batch[0]).dtype)

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        self.seen["predict"] = (batch[0].dtype,)
        return self.net(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum)


def _net(seed: int = 0, **kwargs: Any) -> Net:
    torch.manual_seed(seed)
    return Net(**kwargs)


def _fit(tmp_path: Path, model: L.LightningModule, epochs: int = 2, **kwargs: Any) -> L.Trainer:
    trainer = quiet_trainer(tmp_path, accelerator="cpu", max_epochs=epochs, limit_val_batches=0, **kwargs)
    trainer.fit(model, make_loader())
    return trainer


def _hand_loop(model: Net, epochs: int, step: Callable[[Net, Tensor, Tensor, torch.optim.Optimizer], None]) -> None:
    optimizer = model.configure_optimizers()
    for _ in range(epochs):
        for x, y in make_loader():
            step(model, x, y, optimizer)


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def _scaler_plugin(**scaler_options: Any) -> MixedPrecision:
    return MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", **scaler_options))


# ---------------------------------------------------------------- bit-identical to hand-written loops


def test_bf16_mixed_on_cpu_gives_the_weights_of_a_hand_written_autocast_loop(tmp_path: Path) -> None:
    trained = _net()
    trainer = _fit(tmp_path, trained, precision="bf16-mixed")
    assert trainer.precision == "bf16-mixed"

    def autocast_step(model: Net, x: Tensor, y: Tensor, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model.net(x), y)
        loss.backward()
        optimizer.step()

    by_hand = _net()
    _hand_loop(by_hand, 2, autocast_step)
    assert _same_weights(trained, by_hand)
    # Autocast really ran: the step computed in bfloat16 with float32 weights, and float32 training ends elsewhere.
    assert trained.seen["step"] == (torch.float32, torch.int64, torch.float32, torch.bfloat16, torch.float32)
    full = _net()
    _fit(tmp_path, full)
    assert not _same_weights(trained, full)


def test_64_true_gives_the_weights_of_a_hand_written_float64_loop(tmp_path: Path) -> None:
    trained = _net()
    trainer = _fit(tmp_path, trained, precision="64-true")
    assert trainer.precision == "64-true"

    def double_step(model: Net, x: Tensor, y: Tensor, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model.net(x.double()), y).backward()
        optimizer.step()

    by_hand = _net().double()
    _hand_loop(by_hand, 2, double_step)
    assert _same_weights(trained, by_hand)
    # Floating inputs, weights and outputs are float64; labels stay integers; tensors made in the step are float64.
    assert trained.seen["step"] == (torch.float64, torch.int64, torch.float64, torch.float64, torch.float64)
    assert torch.get_default_dtype() == torch.float32


# ---------------------------------------------------------------- 16-mixed on the CPU


@pytest.mark.parametrize("value", ["16-mixed", "16", 16])
def test_16_mixed_on_cpu_warns_then_runs_bf16_mixed(tmp_path: Path, value: Any) -> None:
    with pytest.warns(UserWarning, match=rf"precision={value!r} .*not supported on the CPU.*'bf16-mixed'"):
        trainer = quiet_trainer(tmp_path, accelerator="cpu", precision=value)
    assert trainer.precision == "bf16-mixed"
    trained = _net()
    trainer.fit(trained, make_loader())
    same = _net()
    _fit(tmp_path, same, epochs=1, precision="bf16-mixed")
    assert _same_weights(trained, same)
    assert trained.seen["step"][3] == torch.bfloat16
    # bf16 needs no gradient scaler, so there is no scaler state to checkpoint.
    trainer.save_checkpoint(tmp_path / "bf16.ckpt")
    assert "MixedPrecision" not in load_checkpoint(tmp_path / "bf16.ckpt")


# ---------------------------------------------------------------- the gradient scaler (16-mixed), on CPU tensors


class Poisoned(Net):
    """Multiplies the loss of batch 1 by `factor` (inf or NaN): its gradients are not finite."""

    def __init__(self, factor: float) -> None:
        super().__init__(momentum=0.0)
        self.factor = factor
        self.weights: list[Tensor] = []
        self.scales: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = self.loss(batch, batch_idx)
        return loss * self.factor if batch_idx == 1 else loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.weights.append(self.net[0].weight.detach().clone())
        self.scales.append(self.trainer.precision_plugin.scaler.get_scale())


@pytest.mark.parametrize("factor", [float("inf"), float("nan")])
def test_scaler_skips_the_update_of_a_step_with_non_finite_gradients(tmp_path: Path, factor: float) -> None:
    model = Poisoned(factor)
    with pytest.warns(TrainerWarning, match="The training loss is (inf|nan) at global step 1") as caught:
        # batch 1 is a logging step (every 2 steps), where the loss is checked
        trainer = _fit(tmp_path, model, epochs=1, log_every_n_steps=2, plugins=[_scaler_plugin(init_scale=2.0**8)])
    assert trainer.precision == "16-mixed"
    # The warning does not claim the weights are harmed: the scaler skips the update (checked below).
    [message] = [str(w.message) for w in caught if "training loss" in str(w.message)]
    assert message.endswith(
        "the gradient scaler skips this step's update. Shown once per run; "
        "EarlyStopping(monitor=..., check_finite=True) stops training on a non-finite metric"
    )
    assert model.seen["step"][3] == torch.float16
    first, poisoned, after = model.weights[0], model.weights[1], model.weights[2]
    assert torch.equal(first, poisoned)  # the update was skipped ...
    assert not torch.equal(poisoned, after)  # ... and the next batch updates again
    assert model.scales[:3] == [2.0**8, 2.0**7, 2.0**7]  # the skip halves the scale (backoff_factor 0.5)
    assert torch.isfinite(model.net[0].weight).all()
    # The step was still taken as far as the loop is concerned: every batch counts towards global_step.
    assert trainer.global_step == 4


class GradientWatcher(L.Callback):
    def __init__(self) -> None:
        self.losses: list[Tensor] = []
        self.grads: list[Tensor] = []

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        self.losses.append(loss.detach().clone())

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        self.grads.append(pl_module.net[0].weight.grad.detach().clone())


def test_gradients_are_unscaled_before_the_pre_step_hooks_and_clipping(tmp_path: Path) -> None:
    scale, clip = 2.0**10, 0.01
    trained = _net(lr=1.0, momentum=0.0)
    before = trained.net[0].weight.detach().clone()
    watcher = GradientWatcher()
    options = {"gradient_clip_val": clip, "gradient_clip_algorithm": "value", "limit_train_batches": 1}
    _fit(tmp_path, trained, epochs=1, plugins=[_scaler_plugin(init_scale=scale)], callbacks=[watcher], **options)

    model = _net(lr=1.0, momentum=0.0)
    optimizer = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    x, y = next(iter(make_loader()))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.cross_entropy(model.net(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    unscaled = model.net[0].weight.grad.detach().clone()
    torch.nn.utils.clip_grad_value_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()

    # on_before_backward sees the scaled loss; on_before_optimizer_step the true (unscaled) gradients.
    assert torch.equal(watcher.losses[0], loss.detach() * scale)
    assert torch.equal(watcher.grads[0], unscaled)
    assert _same_weights(trained, model)
    # The clip value bounds the true gradients: with lr=1 the largest change is exactly the clip value.
    assert unscaled.abs().max() > clip
    assert (before - trained.net[0].weight).abs().max().item() == pytest.approx(clip)


class ManualNet(Net):
    def __init__(self) -> None:
        super().__init__(momentum=0.0)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(self.loss(batch, batch_idx))
        optimizer.step()


def test_manual_optimization_with_a_scaler_matches_a_hand_written_scaled_loop(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trained = ManualNet()
    _fit(tmp_path, trained, epochs=1, plugins=[_scaler_plugin(init_scale=2.0**6, growth_interval=2)])

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**6, growth_interval=2)

    def scaled_step(model: Net, x: Tensor, y: Tensor, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model.net(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    torch.manual_seed(0)
    by_hand = ManualNet()
    _hand_loop(by_hand, 1, scaled_step)
    assert _same_weights(trained, by_hand)
    # 4 good steps, growth every 2: the scale doubled twice.
    assert trained.trainer.precision_plugin.scaler.get_scale() == scaler.get_scale() == 2.0**8


class ScaleRecorder(L.Callback):
    def __init__(self) -> None:
        self.scales: list[float] = []
        self.at_train_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.at_train_start = trainer.precision_plugin.scaler.get_scale()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.scales.append(trainer.precision_plugin.scaler.get_scale())


# The resumed run has no ModelCheckpoint, so the saved callback state belongs to no callback.
@pytest.mark.filterwarnings("ignore:.*holds state for callbacks:UserWarning")
def test_scaler_state_is_checkpointed_under_mixed_precision_and_restored_on_resume(tmp_path: Path) -> None:
    # The scale doubles after every good step, until fp16 gradients overflow and a step is skipped: the run's
    # weights depend on the scaler's state, so a resume only matches when that state comes back.
    options = {"init_scale": 2.0**14, "growth_interval": 1}
    straight, recorder = _net(), ScaleRecorder()
    every_three = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=3, save_top_k=-1)
    _fit(
        tmp_path,
        straight,
        epochs=3,
        plugins=[_scaler_plugin(**options)],
        callbacks=[recorder, every_three],
        enable_checkpointing=True,
    )
    assert any(later < earlier for earlier, later in zip(recorder.scales[3:], recorder.scales[4:]))

    saved = load_checkpoint(tmp_path / "ckpts" / "epoch=0-step=3.ckpt")
    assert saved["MixedPrecision"] == {
        "scale": recorder.scales[2],
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 1,
        "_growth_tracker": 0,  # reset by the growth that the step just made
    }

    resumed, resumed_recorder = _net(seed=7), ScaleRecorder()
    trainer = quiet_trainer(
        tmp_path / "resume",
        accelerator="cpu",
        max_epochs=3,
        limit_val_batches=0,
        plugins=[MixedPrecision("16-mixed", "cpu")],  # a fresh scaler with other settings: the file's state wins
        callbacks=[resumed_recorder],
    )
    trainer.fit(resumed, make_loader(), ckpt_path=tmp_path / "ckpts" / "epoch=0-step=3.ckpt")
    assert resumed_recorder.at_train_start == recorder.scales[2]
    assert resumed_recorder.scales == recorder.scales[3:]
    assert _same_weights(resumed, straight)


def test_a_scaler_refuses_lbfgs_and_clipping_a_fused_optimizer(tmp_path: Path) -> None:
    class WithOptimizer(Net):
        def __init__(self, make: Callable[[Any], torch.optim.Optimizer]) -> None:
            super().__init__()
            self.make = make

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return self.make(self.parameters())

    with pytest.raises(RuntimeError, match="cannot step LBFGS"):
        _fit(tmp_path, WithOptimizer(torch.optim.LBFGS), plugins=[_scaler_plugin()])
    fused = WithOptimizer(lambda params: torch.optim.Adam(params, fused=True))
    with pytest.raises(RuntimeError, match="Adam unscales its gradients inside step"):
        _fit(tmp_path, fused, plugins=[_scaler_plugin()], gradient_clip_val=1.0)


# ---------------------------------------------------------------- true precisions


@pytest.mark.parametrize(("value", "dtype"), [("bf16-true", torch.bfloat16), ("16-true", torch.float16)])
def test_true_half_precisions_convert_the_module_and_floating_inputs(
    tmp_path: Path, value: str, dtype: torch.dtype
) -> None:
    model = _net()
    trainer = quiet_trainer(tmp_path, accelerator="cpu", precision=value, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, make_loader(), make_loader())
    assert trainer.precision == value
    # Weights, floating inputs and outputs in the dtype; labels stay integers; tensors made in a step too.
    assert model.seen["step"] == (dtype, torch.int64, dtype, dtype, dtype)
    assert model.seen["validation"] == (dtype, dtype)
    assert all(p.dtype == dtype for p in model.parameters())
    assert torch.get_default_dtype() == torch.float32
    (predictions,) = trainer.predict(model, make_loader(n=8))
    assert model.seen["predict"] == (dtype,) and predictions.dtype == dtype


def test_convert_floating_casts_only_floating_tensors_in_any_container() -> None:
    batch = {"x": [torch.ones(2), (torch.zeros(1, dtype=torch.float64),)], "y": torch.arange(2), "name": "a"}
    converted = convert_floating(batch, torch.bfloat16)
    assert converted["x"][0].dtype == torch.bfloat16 and converted["x"][1][0].dtype == torch.bfloat16
    assert converted["y"].dtype == torch.int64 and converted["name"] == "a"
    assert batch["x"][0].dtype == torch.float32  # the caller's batch is not modified
    ready = (torch.ones(2, dtype=torch.bfloat16), torch.arange(2))
    assert convert_floating(ready, torch.bfloat16) is ready


# ---------------------------------------------------------------- init_module


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        ("bf16-true", torch.bfloat16),
        ("16-true", torch.float16),
        ("64-true", torch.float64),
        ("bf16-mixed", torch.float32),
        ("32-true", torch.float32),
    ],
)
def test_init_module_creates_parameters_in_the_precision_dtype(tmp_path: Path, value: str, dtype: torch.dtype) -> None:
    trainer = quiet_trainer(tmp_path, accelerator="cpu", precision=value)
    with trainer.init_module():
        layer = nn.Linear(3, 2)
        made_in_context = torch.zeros(1)
    assert layer.weight.dtype == layer.bias.dtype == made_in_context.dtype == dtype
    assert layer.weight.device == torch.device("cpu")
    assert torch.get_default_dtype() == torch.float32


def test_init_module_with_empty_init_skips_weight_initialisation(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, accelerator="cpu", precision="bf16-true")
    state = torch.random.get_rng_state()
    with trainer.init_module(empty_init=True):
        layer = nn.Linear(3, 2)
    # The random initialisers never ran, so they drew nothing from the generator.
    assert torch.equal(torch.random.get_rng_state(), state) and layer.weight.dtype == torch.bfloat16
    with trainer.init_module(empty_init=False):
        nn.Linear(3, 2)
    assert not torch.equal(torch.random.get_rng_state(), state)


# ---------------------------------------------------------------- values, aliases, plugins, refusals


@pytest.mark.parametrize(
    ("value", "name", "plugin"),
    [
        (None, "32-true", Precision),
        (32, "32-true", Precision),
        ("32", "32-true", Precision),
        ("32-true", "32-true", Precision),
        (64, "64-true", DoublePrecision),
        ("64", "64-true", DoublePrecision),
        ("64-true", "64-true", DoublePrecision),
        ("bf16", "bf16-mixed", MixedPrecision),
        ("bf16-mixed", "bf16-mixed", MixedPrecision),
        ("bf16-true", "bf16-true", HalfPrecision),
        ("16-true", "16-true", HalfPrecision),
    ],
)
def test_precision_values_and_aliases_map_to_lightnings_names(
    tmp_path: Path, value: Any, name: str, plugin: type
) -> None:
    trainer = quiet_trainer(tmp_path, accelerator="cpu", precision=value)
    assert trainer.precision == name
    assert type(trainer.precision_plugin) is plugin  # its class name is the checkpoint key of its state


@pytest.mark.parametrize(
    "value", ["transformer-engine", "transformer-engine-float16", "fp8", 8, True, 32.0, "32-TRUE", "bf32"]
)
def test_unknown_and_unsupported_precisions_are_refused_with_the_allowed_values(tmp_path: Path, value: Any) -> None:
    with pytest.raises(L.MisconfigurationException) as info:
        quiet_trainer(tmp_path, precision=value)
    message = str(info.value)
    assert f"precision={value!r}" in message
    assert all(allowed in message for allowed in ALLOWED)


def test_plugins_take_one_precision_plugin_instead_of_the_flag(tmp_path: Path) -> None:
    assert quiet_trainer(tmp_path, accelerator="cpu", plugins=HalfPrecision("bf16-true")).precision == "bf16-true"
    both = r"Received both `precision=bf16-mixed` and `plugins=DoublePrecision\('64-true'\)`. Choose one."
    with pytest.raises(L.MisconfigurationException, match=both):
        quiet_trainer(tmp_path, precision="bf16-mixed", plugins=[DoublePrecision()])
    with pytest.raises(L.MisconfigurationException, match="holds 2 precision plugins"):
        quiet_trainer(tmp_path, plugins=[DoublePrecision(), DoublePrecision()])
    with pytest.raises(
        L.MisconfigurationException,
        match="Found invalid type for plugin 'something'. Expected one of: Precision, CheckpointIO, ClusterEnvironment",
    ):
        quiet_trainer(tmp_path, plugins=["something"])
    with pytest.raises(L.MisconfigurationException, match="autocasts on 'cuda'.*accelerator 'cpu'"):
        quiet_trainer(tmp_path, accelerator="cpu", plugins=[MixedPrecision("bf16-mixed", "cuda")])


def test_precision_plugins_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="precision='32-true'.*'16-mixed' or 'bf16-mixed'"):
        MixedPrecision("32-true", "cpu")
    with pytest.raises(ValueError, match="device='mps'"):
        MixedPrecision("bf16-mixed", "mps")
    with pytest.raises(ValueError, match="takes no gradient scaler"):
        MixedPrecision("bf16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    with pytest.raises(ValueError, match="'16-true' or 'bf16-true'"):
        HalfPrecision("16-mixed")


@pytest.mark.parametrize("value", ["64-true", "16", "bf16", 32])
def test_fsdp_precision_takes_lightning_s_five_names_only(value: Any) -> None:
    with pytest.raises(ValueError, match="is not supported in FSDP. `precision` must be one of") as raised:
        FSDPPrecision(value)
    assert repr(value) in str(raised.value)


def test_fsdp_precision_maps_each_name_to_an_fsdp2_policy() -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mixed = FSDPPrecision("bf16-mixed")
    assert mixed.precision == "bf16-mixed"
    # bfloat16 copies of float32 shards to compute with; gradients reduced in float32
    assert mixed.mixed_precision_config == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for name in ("32-true", "16-true", "bf16-true"):  # the parameters' own dtype throughout
        assert FSDPPrecision(name).mixed_precision_config == MixedPrecisionPolicy()
    module = FSDPPrecision("bf16-true").convert_module(nn.Linear(2, 2))
    assert module.weight.dtype == torch.bfloat16


def test_fsdp_precision_refuses_a_gradient_scaler() -> None:
    with pytest.raises(ValueError, match="a gradient scaler does not handle sharded gradients; use 'bf16-mixed'"):
        FSDPPrecision("16-mixed")


def test_fsdp_precision_needs_the_fsdp_strategy(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs strategy='fsdp'"):
        quiet_trainer(tmp_path, plugins=[FSDPPrecision("bf16-mixed")])
