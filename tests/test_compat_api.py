"""Lightning's public API beyond the loops: LightningModule helpers, checkpoint loading, hyperparameter files,
DataModule constructors, Trainer attributes, and the utilities users import. Expected values follow Lightning's
documented behaviour."""

from __future__ import annotations

import inspect
import logging
import os
import pickle
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

import statemachine as L
from statemachine.core.saving import load_hparams_from_yaml, save_hparams_to_yaml
from statemachine.loggers import CSVLogger, TensorBoardLogger
from tests.conftest import TinyModel, make_loader, quiet_trainer


class HParamModel(TinyModel):
    def __init__(self, hidden: int = 3, lr: float = 0.1):
        super().__init__(lr=lr)
        self.save_hyperparameters()
        self.layer = nn.Sequential(nn.Linear(4, hidden), nn.Linear(hidden, 2))


def _fit_and_save(tmp_path: Path, model: L.LightningModule, **trainer_kwargs: Any) -> tuple[L.Trainer, Path]:
    trainer = quiet_trainer(tmp_path, **trainer_kwargs)
    trainer.fit(model, make_loader())
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    return trainer, path


# ---- LightningModule: device, dtype, helpers ----------------------------------------------------------------


def test_dtype_and_device_follow_to_and_the_cast_methods() -> None:
    model = TinyModel()
    assert model.dtype == torch.float32 and model.device == torch.device("cpu") and model.on_gpu is False
    model.double()
    assert model.dtype == torch.float64 and model.layer.weight.dtype == torch.float64
    model.to(torch.float16)
    assert model.dtype == torch.float16
    model.to("cpu", dtype=torch.float32)
    assert model.dtype == torch.float32
    with pytest.raises(RuntimeError, match="dtype cannot be set"):
        model.dtype = torch.float64


def test_dtype_is_tracked_without_parameters() -> None:
    empty = L.LightningModule()
    empty.half()
    assert empty.dtype == torch.float16


def test_print_writes_on_rank_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    model = TinyModel()
    model.print("unattached")
    trainer.fit(model, make_loader())
    model.print("attached", 1)
    trainer.print("from the trainer")
    assert capsys.readouterr().out.splitlines() == ["unattached", "attached 1", "from the trainer"]


class TwoOptimizers(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.gen = nn.Linear(4, 4)
        self.disc = nn.Linear(4, 1)
        self.inside: list[tuple[bool, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_g, opt_d = self.optimizers()
        with self.toggled_optimizer(opt_g):
            self.inside.append((self.gen.weight.requires_grad, self.disc.weight.requires_grad))
            loss = self.disc(self.gen(batch[0])).mean()
            self.manual_backward(loss)
            opt_g.step()
            opt_g.zero_grad()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.gen.parameters(), lr=0.1), torch.optim.SGD(self.disc.parameters(), lr=0.1)


def test_toggled_optimizer_freezes_the_other_optimizers_parameters_for_the_block(tmp_path: Path) -> None:
    model = TwoOptimizers()
    quiet_trainer(tmp_path).fit(model, make_loader())
    assert model.inside and all(inside == (True, False) for inside in model.inside)
    assert model.disc.weight.requires_grad  # restored after the block


def test_toggled_optimizer_restores_when_the_block_raises(tmp_path: Path) -> None:
    model = TwoOptimizers()
    trainer = quiet_trainer(tmp_path)
    trainer.fit(model, make_loader())
    opt_g = trainer.optimizers[0]
    with pytest.raises(ValueError, match="inside"), model.toggled_optimizer(opt_g):
        raise ValueError("inside")
    assert model.disc.weight.requires_grad


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")  # torch's own notice, not ours
def test_to_torchscript_scripts_and_traces_and_saves(tmp_path: Path) -> None:
    model = TinyModel()
    model.example_input_array = torch.randn(3, 4)
    x = torch.randn(5, 4)
    scripted = model.to_torchscript(file_path=tmp_path / "m.pt")
    assert torch.allclose(scripted(x), model(x))
    assert torch.allclose(torch.jit.load(str(tmp_path / "m.pt"))(x), model(x))
    traced = model.to_torchscript(method="trace")
    assert torch.allclose(traced(x), model(x))
    assert model.training  # the mode before export is restored
    with pytest.raises(ValueError, match="method='compile' must be 'script' or 'trace'"):
        model.to_torchscript(method="compile")
    with pytest.raises(ValueError, match="needs example_inputs"):
        TinyModel().to_torchscript(method="trace")


def test_to_onnx_without_onnx_installed_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)
    with pytest.raises(ModuleNotFoundError, match=r"to_onnx\(\) needs the onnx package"):
        TinyModel().to_onnx(tmp_path / "m.onnx", torch.randn(1, 4))


def test_example_input_array_adds_in_and_out_sizes_to_the_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = HParamModel(hidden=3)
    model.example_input_array = torch.zeros(2, 4)
    with caplog.at_level(logging.INFO, logger="stages.callbacks.model_summary"):
        # the plain summary (the default one is rich's where rich is installed)
        quiet_trainer(tmp_path, enable_model_summary=True, callbacks=[L.ModelSummary()]).fit(model, make_loader())
    out = caplog.text
    assert "In sizes" in out and "Out sizes" in out
    row = next(line for line in out.splitlines() if line.startswith("0 ") and "Sequential" in line)
    assert "[2, 4]" in row and "[2, 2]" in row


def test_hooks_are_declared_on_the_class_with_lightnings_signatures() -> None:
    assert "on_train_batch_end" in vars(L.LightningModule)
    assert list(inspect.signature(L.LightningModule.on_train_batch_end).parameters) == [
        "self",
        "outputs",
        "batch",
        "batch_idx",
    ]
    assert list(inspect.signature(L.LightningModule.on_validation_batch_start).parameters) == [
        "self",
        "batch",
        "batch_idx",
        "dataloader_idx",
    ]


# ---- checkpoints and hyperparameters ------------------------------------------------------------------------


def test_checkpoint_hyperparameter_constants() -> None:
    assert L.LightningModule.CHECKPOINT_HYPER_PARAMS_KEY == "hyper_parameters"
    assert L.LightningModule.CHECKPOINT_HYPER_PARAMS_NAME == "hparams_name"
    assert L.LightningModule.CHECKPOINT_HYPER_PARAMS_TYPE == "hparams_type"
    assert L.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY == "datamodule_hyper_parameters"


def test_load_from_checkpoint_rebuilds_with_saved_hparams_and_overrides(tmp_path: Path) -> None:
    trained = HParamModel(hidden=5, lr=0.3)
    _, path = _fit_and_save(tmp_path, trained)
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["hyper_parameters"] == {"hidden": 5, "lr": 0.3}
    assert checkpoint["hparams_name"] == "kwargs"
    loaded = HParamModel.load_from_checkpoint(path)
    assert loaded.hparams == {"hidden": 5, "lr": 0.3}
    assert torch.equal(loaded.layer[0].weight, trained.layer[0].weight)
    assert loaded.device == torch.device("cpu")
    overridden = HParamModel.load_from_checkpoint(path, map_location="cpu", lr=0.01)
    assert overridden.hparams.lr == 0.01 and overridden.hparams.hidden == 5


def test_load_from_checkpoint_with_hparams_file(tmp_path: Path) -> None:
    _, path = _fit_and_save(tmp_path, HParamModel(hidden=5))
    hparams_file = tmp_path / "hparams.yaml"
    save_hparams_to_yaml(hparams_file, {"hidden": 5, "lr": 0.7})
    loaded = HParamModel.load_from_checkpoint(path, hparams_file=hparams_file)
    assert loaded.hparams.lr == 0.7
    with pytest.raises(ValueError, match=r"\.csv, \.yml or \.yaml is required for `hparams_file`"):
        HParamModel.load_from_checkpoint(path, hparams_file=tmp_path / "hparams.json")


def test_load_from_checkpoint_strict_and_weights_only(tmp_path: Path) -> None:
    _, path = _fit_and_save(tmp_path, HParamModel(hidden=5))

    class Wider(HParamModel):
        def __init__(self, hidden: int = 3, lr: float = 0.1):
            super().__init__(hidden, lr)
            self.extra = nn.Linear(1, 1)

    with pytest.raises(RuntimeError, match="Missing key"):
        Wider.load_from_checkpoint(path)
    with pytest.warns(UserWarning, match=r"in the model state dict but not in the checkpoint: .*extra\.weight"):
        Wider.load_from_checkpoint(path, strict=False)
    safe = HParamModel.load_from_checkpoint(path, weights_only=True)
    assert safe.hparams.hidden == 5


def test_weights_only_refuses_arbitrary_objects_with_a_clear_error(tmp_path: Path) -> None:
    class Stores(TinyModel):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["extra"] = threading.Event  # a class: not a plain value

    _, path = _fit_and_save(tmp_path, Stores())
    with pytest.raises(pickle.UnpicklingError, match="weights_only=True refuses"):
        TinyModel.load_from_checkpoint(path, weights_only=True)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=True refuses"):
        quiet_trainer(tmp_path, max_epochs=2).fit(TinyModel(), make_loader(), ckpt_path=path, weights_only=True)
    quiet_trainer(tmp_path, max_epochs=2).fit(TinyModel(), make_loader(), ckpt_path=path, weights_only=False)
    # validate, test and predict take the same argument (Lightning 2.6's signatures)
    trainer = quiet_trainer(tmp_path)
    for entry in (trainer.validate, trainer.test, trainer.predict):
        with pytest.raises(pickle.UnpicklingError, match="weights_only=True refuses"):
            entry(TinyModel(), make_loader(), ckpt_path=path, weights_only=True)
        assert entry(TinyModel(), make_loader(), ckpt_path=path) is not None


def test_load_from_checkpoint_on_an_instance_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="is a classmethod: call it on the class"):
        TinyModel().load_from_checkpoint(tmp_path / "x.ckpt")
    with pytest.raises(TypeError, match=r"StatefulData\.load_from_checkpoint is a classmethod"):
        StatefulData().load_from_checkpoint(tmp_path / "x.ckpt")


def test_a_single_dict_argument_comes_back_under_its_name(tmp_path: Path) -> None:
    class DictModel(TinyModel):
        def __init__(self, config: dict[str, Any]):
            super().__init__()
            self.save_hyperparameters(config)

    _, path = _fit_and_save(tmp_path, DictModel({"depth": 2}))
    assert torch.load(path, weights_only=False)["hparams_name"] == "config"
    assert DictModel.load_from_checkpoint(path).hparams == {"depth": 2}


class Base(L.LightningModule):
    def __init__(self, lr: float = 0.1, **kwargs: Any):
        super().__init__()
        self.save_hyperparameters()


class Child(Base):
    def __init__(self, units: int = 8, lr: float = 0.01):
        super().__init__(lr=lr)


class SavesAgain(Base):
    def __init__(self, units: int = 8, lr: float = 0.01):
        super().__init__(lr=lr)
        self.save_hyperparameters()


def test_save_hyperparameters_in_a_parent_collects_the_subclass_arguments() -> None:
    assert Child(units=4).hparams == {"lr": 0.01, "units": 4}
    assert SavesAgain(units=16, lr=0.5).hparams == {"lr": 0.5, "units": 16}
    assert Base(lr=0.2, momentum=0.9).hparams == {"lr": 0.2, "momentum": 0.9}


def test_save_hyperparameters_with_an_unknown_name_is_refused() -> None:
    class Named(L.LightningModule):
        def __init__(self, lr: float = 0.1):
            super().__init__()
            self.save_hyperparameters("lr", "batch_size")

    with pytest.raises(KeyError, match="'batch_size'"):
        Named()


@pytest.mark.parametrize("logger_class", [TensorBoardLogger, CSVLogger])
def test_loggers_write_hparams_yaml_that_load_from_checkpoint_reads(tmp_path: Path, logger_class: type) -> None:
    logger = logger_class(tmp_path)
    trainer, path = _fit_and_save(tmp_path, HParamModel(hidden=6, lr=0.2), logger=logger, log_every_n_steps=1)
    hparams_file = Path(logger.log_dir) / "hparams.yaml"
    assert load_hparams_from_yaml(hparams_file) == {"hidden": 6, "lr": 0.2}
    assert HParamModel.load_from_checkpoint(path, hparams_file=hparams_file).hparams.hidden == 6


def test_yaml_helpers_skip_values_yaml_cannot_hold(tmp_path: Path) -> None:
    target = tmp_path / "h.yaml"
    with pytest.warns(UserWarning, match="Skipping 'lock' parameter because it is not possible to safely dump"):
        save_hparams_to_yaml(target, {"lr": 0.1, "lock": threading.Lock(), "sizes": (2, 3)}, use_omegaconf=False)
    assert load_hparams_from_yaml(target, use_omegaconf=False) == {"lr": 0.1, "sizes": (2, 3)}
    with pytest.warns(RuntimeWarning, match="Missing Tags: .*absent.yaml"):
        assert load_hparams_from_yaml(tmp_path / "absent.yaml") == {}


# ---- DataModule ---------------------------------------------------------------------------------------------


def _dataset(n: int) -> TensorDataset:
    return TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))


def test_from_datasets_builds_shuffling_train_and_sequential_eval_loaders(tmp_path: Path) -> None:
    datamodule = L.LightningDataModule.from_datasets(
        train_dataset=_dataset(8), val_dataset=[_dataset(4), _dataset(6)], batch_size=2
    )
    train = datamodule.train_dataloader()
    assert isinstance(train.sampler, RandomSampler) and train.batch_size == 2
    assert [len(loader) for loader in datamodule.val_dataloader()] == [2, 3]
    trainer = quiet_trainer(tmp_path)
    seen: list[int] = []

    class Counts(TinyModel):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            seen.append(dataloader_idx)

    trainer.fit(Counts(), datamodule=datamodule)
    assert trainer.global_step == 4
    assert seen.count(0) == 2 + 2 and seen.count(1) == 2 + 3  # sanity check (2 batches each), then one epoch


def test_from_datasets_passes_batch_size_to_a_constructor_that_takes_it() -> None:
    class Sized(L.LightningDataModule):
        def __init__(self, batch_size: int, name: str = "x"):
            super().__init__()
            self.batch_size, self.name = batch_size, name

    datamodule = Sized.from_datasets(test_dataset=_dataset(4), batch_size=3, name="y")
    assert (datamodule.batch_size, datamodule.name) == (3, "y")
    assert datamodule.test_dataloader().batch_size == 3


class StatefulData(L.LightningDataModule):
    def __init__(self, batch_size: int = 2):
        super().__init__()
        self.save_hyperparameters()
        self.epochs_seen = 0

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_dataset(4), batch_size=self.hparams.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_seen": 7}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs_seen = state_dict["epochs_seen"]


def test_datamodule_load_from_checkpoint_restores_hparams_and_state(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    trainer.fit(TinyModel(), datamodule=StatefulData(batch_size=4))
    trainer.save_checkpoint(tmp_path / "dm.ckpt")
    loaded = StatefulData.load_from_checkpoint(tmp_path / "dm.ckpt")
    assert loaded.hparams.batch_size == 4
    assert loaded.epochs_seen == 7
    assert StatefulData.load_from_checkpoint(tmp_path / "dm.ckpt", batch_size=1).hparams.batch_size == 1


# ---- Trainer --------------------------------------------------------------------------------------------------


def test_logger_setter_replaces_the_loggers(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path)
    csv = CSVLogger(tmp_path)
    trainer.logger = csv
    assert trainer.logger is csv and trainer.loggers == [csv]
    trainer.logger = None
    assert trainer.logger is None and trainer.loggers == []


def test_ckpt_path_holds_the_checkpoint_each_run_loaded(tmp_path: Path) -> None:
    callback = L.ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_last=True)
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[callback], enable_checkpointing=True)
    model = TinyModel()
    trainer.fit(model, make_loader(), make_loader())
    assert trainer.ckpt_path is None
    trainer.validate(model, make_loader(), ckpt_path="best", verbose=False)
    assert trainer.ckpt_path == callback.best_model_path
    trainer.test(model, make_loader(), ckpt_path="last", verbose=False)
    assert trainer.ckpt_path == callback.last_model_path
    trainer.test(model, make_loader(), verbose=False)
    assert trainer.ckpt_path is None
    trainer.ckpt_path = callback.best_model_path  # set by the user: the next calls load it
    trainer.test(model, make_loader(), verbose=False)
    assert trainer.ckpt_path == callback.best_model_path


def test_loop_objects_expose_their_batch_progress(tmp_path: Path) -> None:
    class TwoTestLoaders(TinyModel):
        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            super().test_step(batch, batch_idx)

    trainer = quiet_trainer(tmp_path, limit_val_batches=2)
    model = TwoTestLoaders()
    trainer.fit(model, make_loader(), make_loader())
    epoch_loop = trainer.fit_loop.epoch_loop
    assert epoch_loop.batch_progress.total.completed == trainer.num_training_batches
    assert epoch_loop.val_loop.batch_progress.total.completed == 2  # the sanity check's batches are not counted
    trainer.validate(model, make_loader(), verbose=False)
    trainer.test(model, [make_loader(), make_loader()], verbose=False)
    trainer.predict(model, make_loader())
    n = len(make_loader())
    assert trainer.validate_loop.batch_progress.total.completed == 2
    assert trainer.test_loop.batch_progress.total.completed == 2 * n
    assert trainer.test_loop.max_batches == [n, n]
    assert trainer.predict_loop.batch_progress.total.completed == n


# ---- utilities --------------------------------------------------------------------------------------------------


def test_grad_norm_keys_and_values() -> None:
    from statemachine.utilities import grad_norm

    layer = nn.Linear(2, 1, bias=False)
    layer.weight.grad = torch.tensor([[3.0, 4.0]])
    norms = grad_norm(layer, norm_type=2)
    assert set(norms) == {"grad_2.0_norm/weight", "grad_2.0_norm_total"}
    assert norms["grad_2.0_norm/weight"].item() == pytest.approx(5.0)
    assert grad_norm(layer, "inf")["grad_inf_norm/weight"].item() == pytest.approx(4.0)
    with pytest.raises(ValueError, match="norm_type must be a positive number or 'inf'"):
        grad_norm(layer, 0)


def test_rank_zero_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    from statemachine.utilities import rank_zero_only, rank_zero_warn

    calls: list[int] = []

    @rank_zero_only
    def record(value: int) -> int:
        calls.append(value)
        return value

    assert record(1) == 1
    with pytest.warns(UserWarning, match="careful") as caught:
        rank_zero_warn("careful")
    assert caught[0].filename == __file__  # Lightning's default stack level: the line that called it
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert record(2) is None
    assert rank_zero_only(record, default=-1)(3) == -1  # Lightning's `default` for the other ranks
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rank_zero_warn("not on rank 1")
    assert calls == [1]


def test_rank_zero_info_logs_to_the_statemachine_logger_at_the_callers_line(caplog: pytest.LogCaptureFixture) -> None:
    from statemachine.utilities import rank_zero_info

    with caplog.at_level(logging.INFO, logger="statemachine"):
        rank_zero_info("ready")
    [record] = [r for r in caplog.records if r.getMessage() == "ready"]
    assert (record.name, record.pathname) == ("statemachine", __file__)


def test_the_rank_comes_from_jsruns_variable_when_no_other_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from stages.rank_zero import _rank_from_environment

    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JSM_NAMESPACE_RANK", "3")
    assert _rank_from_environment() == 3


def test_rank_zero_experiment_gives_other_ranks_a_do_nothing_experiment(monkeypatch: pytest.MonkeyPatch) -> None:
    from statemachine.loggers.logger import rank_zero_experiment
    from statemachine.utilities import rank_zero_only

    class Owner:
        @property
        @rank_zero_experiment
        def experiment(self) -> str:
            return "real"

    assert Owner().experiment == "real"
    monkeypatch.setattr(rank_zero_only, "rank", 3)
    assert Owner().experiment.add_scalar("x", 1) is not None  # accepts any call


def test_isolate_rng_leaves_the_following_draws_unchanged() -> None:
    from statemachine.utilities.seed import isolate_rng

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    with isolate_rng():
        torch.rand(10)
    assert torch.equal(torch.rand(3), expected)


def test_is_overridden_and_move_data_to_device() -> None:
    from statemachine.utilities import move_data_to_device
    from statemachine.utilities.model_helpers import is_overridden

    assert is_overridden("training_step", TinyModel())
    assert not is_overridden("on_fit_start", TinyModel())
    moved = move_data_to_device({"x": [torch.ones(1)]}, "cpu")
    assert moved["x"][0].device == torch.device("cpu")


# ---- demos -------------------------------------------------------------------------------------------------------


def test_demo_models_train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # LightningTransformer's prepare_data writes its corpus to ./data
    from statemachine.demos import BoringDataModule, BoringModel, DemoModel, LightningTransformer
    from statemachine.demos.boring_classes import ManualOptimBoringModel, RandomDataset

    trainer = quiet_trainer(tmp_path, limit_train_batches=4, limit_val_batches=2)
    trainer.fit(BoringModel(), datamodule=BoringDataModule())
    assert trainer.global_step == 4
    quiet_trainer(tmp_path, limit_train_batches=2).fit(ManualOptimBoringModel())
    results = quiet_trainer(tmp_path).test(DemoModel(), DataLoader(RandomDataset(32, 4)), verbose=False)
    assert "test_loss" in results[0]
    tokens = torch.randint(0, 20, (4, 6))
    transformer = quiet_trainer(tmp_path, limit_train_batches=1)
    transformer.fit(LightningTransformer(vocab_size=20), DataLoader(TensorDataset(tokens, tokens), batch_size=2))
    assert transformer.global_step == 1
    assert os.path.isdir(tmp_path)


def test_a_lightning_optimizer_built_alone_reads_and_clears_like_its_optimizer() -> None:
    from statemachine.core.optimizer import LightningOptimizer

    weight = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    wrapped = LightningOptimizer(optimizer)  # Lightning's call form: the optimizer alone
    assert wrapped.optimizer is optimizer and wrapped.param_groups is optimizer.param_groups
    assert wrapped.defaults["lr"] == 0.5  # anything else reads through to the optimizer
    weight.grad = torch.ones(2)
    wrapped.zero_grad()
    assert weight.grad is None
    with pytest.raises(RuntimeError, match=r"LightningOptimizer.step\(\) needs a trainer"):
        wrapped.step()
    assert torch.equal(weight.detach(), torch.ones(2))


def test_a_strategy_is_connected_to_the_module_it_runs(tmp_path: Path) -> None:
    """Lightning's `strategy.connect(model)`, `strategy.lightning_module` and `strategy.model`, also on a strategy
    built alone, as libraries pass them around."""
    from statemachine.strategies import DDPStrategy

    alone, module = DDPStrategy(), TinyModel()
    alone.connect(module)
    assert alone.lightning_module is module and alone.model is module
    model = TinyModel()
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    trainer.fit(model, make_loader())
    assert trainer.strategy.lightning_module is model and trainer.strategy.model is model
