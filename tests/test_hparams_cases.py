"""Hyperparameters in every form Lightning users write them, and load_from_checkpoint with what they saved."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import pickle
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import nn

import statemachine as L
from statemachine.core.mixins import HyperparametersMixin
from statemachine.core.optimizer import LightningOptimizer
from statemachine.core.saving import load_hparams_from_yaml, save_hparams_to_tags_csv, save_hparams_to_yaml
from statemachine.utilities import AttributeDict
from tests.conftest import MemoryLogger, TinyModel, make_loader, quiet_trainer


class Saves(TinyModel):
    """A TinyModel whose `__init__` arguments are saved."""

    def __init__(self, lr: float = 0.1, hidden: int = 4, **kwargs: Any) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()


def _fit(tmp_path: Path, model: L.LightningModule, datamodule: Any = None, **kwargs: Any) -> L.Trainer:
    trainer = quiet_trainer(tmp_path, max_steps=1, log_every_n_steps=1, **kwargs)
    if datamodule is None:
        trainer.fit(model, make_loader())
    else:
        trainer.fit(model, datamodule=datamodule)
    return trainer


def _saved(tmp_path: Path, model: L.LightningModule, name: str = "m.ckpt") -> Path:
    path = tmp_path / name
    _fit(tmp_path, model).save_checkpoint(path)
    return path


# ---- what save_hyperparameters() collects ----------------------------------------------------------------------


class Base(L.LightningModule):
    def __init__(self, a: int = 1, b: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()


class Sub(Base):
    def __init__(self, c: int = 3, a: int = 10, **kwargs: Any) -> None:
        super().__init__(a=a, **kwargs)


class Mixin:
    def __init__(self, m: int = 7, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class Mixed(Mixin, Base):
    def __init__(self, z: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)


def test_the_init_arguments_of_the_whole_chain_are_collected_the_outer_value_winning() -> None:
    sub = Sub(c=4, b=5)
    assert sub.hparams == {"a": 10, "b": 5, "c": 4}
    assert sub._hparams_name == "kwargs"
    assert Mixed(z=1, m=8, a=3).hparams == {"a": 3, "b": 2, "m": 8, "z": 1}


def test_keywords_are_flattened_and_star_args_left_out() -> None:
    class Flexible(L.LightningModule):
        def __init__(self, a: int, *args: Any, b: int = 2, **kwargs: Any) -> None:
            super().__init__()
            a = a * 10  # the saved value is the local's at the call
            self.save_hyperparameters()

    assert Flexible(1, 5, 6, b=3, k=4, nested={"n": 1}).hparams == {"a": 10, "b": 3, "k": 4, "nested": {"n": 1}}


def test_a_module_built_inside_another_s_init_collects_its_builder_s_arguments_too() -> None:
    class Outer(L.LightningModule):
        def __init__(self, o: int = 1) -> None:
            super().__init__()
            self.inner = Base(a=5)

    assert Outer().inner.hparams == {"a": 5, "b": 2, "o": 1}


def test_a_dataclass_module_saves_its_init_fields() -> None:
    @dataclasses.dataclass(eq=False)
    class Config(L.LightningModule):
        a: int = 1
        b: str = "x"
        derived: int = dataclasses.field(init=False, default=5)

        def __post_init__(self) -> None:
            super().__init__()
            self.save_hyperparameters()

    assert Config(a=2).hparams == {"a": 2, "b": "x"}


def test_a_subclass_ignores_what_its_parent_saved_and_modules_warn() -> None:
    class Parent(L.LightningModule):
        def __init__(self, a: int = 1, net: nn.Module | None = None) -> None:
            super().__init__()
            self.save_hyperparameters()

    class Child(Parent):
        def __init__(self, a: int = 1, net: nn.Module | None = None, d: int = 4) -> None:
            super().__init__(a, net)
            self.save_hyperparameters(ignore=["net"])

    with pytest.warns(UserWarning, match=r"Attribute 'net' is an instance of `nn.Module` and is already saved"):
        child = Child(net=nn.Linear(1, 1))
    assert child.hparams == {"a": 1, "d": 4}
    assert child.hparams_initial == {"a": 1, "d": 4}


def test_named_arguments_and_their_errors() -> None:
    class Named(L.LightningModule):
        def __init__(self, a: int = 1, b: int = 2, c: int = 3, missing: str = "zz", ignore_b: bool = False) -> None:
            super().__init__()
            self.save_hyperparameters("a", "b", *([missing] if missing else []), ignore="b" if ignore_b else None)

    assert Named(missing="").hparams == {"a": 1, "b": 2}
    with pytest.raises(KeyError, match="'zz'"):
        Named()
    with pytest.raises(KeyError, match="'b'"):
        Named(missing="", ignore_b=True)


class Given(L.LightningModule):
    def __init__(self, conf: Any, n: int = 1) -> None:
        super().__init__()
        self.save_hyperparameters(conf)


def test_one_dict_or_namespace_is_saved_under_the_argument_it_came_in() -> None:
    from_dict = Given({"x": 1, "y": 2})
    assert (from_dict.hparams, from_dict._hparams_name) == ({"x": 1, "y": 2}, "conf")
    from_namespace = Given(argparse.Namespace(x=1, y="s"))
    assert (type(from_namespace.hparams), from_namespace.hparams) == (AttributeDict, {"x": 1, "y": "s"})
    empty = Given({})
    assert (empty.hparams, "_hparams_name" in vars(empty), empty._log_hyperparams) == ({}, False, True)
    with pytest.raises(ValueError, match=r"Primitives .* are not allowed"):
        Given(5)
    with pytest.raises(ValueError, match="Unsupported config type of <class 'list'>"):
        Given([1, 2])


def test_a_frame_given_or_a_helper_method_reaches_the_init() -> None:
    def save_from(model: L.LightningModule, frame: FrameType | None) -> None:
        model.save_hyperparameters(frame=frame)

    class WithFrame(L.LightningModule):
        def __init__(self, a: int = 1, frame: int = 3) -> None:
            super().__init__()
            save_from(self, inspect.currentframe())

    class WithHelper(L.LightningModule):
        def __init__(self, a: int = 1) -> None:
            super().__init__()
            self._save()

        def _save(self) -> None:
            self.save_hyperparameters()

    assert WithFrame().hparams == {"a": 1}  # an argument named `frame` is never a hyperparameter
    assert WithHelper().hparams == {"a": 1}


def test_saved_before_super_init_the_hyperparameters_stay_but_are_not_logged() -> None:
    class Early(L.LightningModule):
        def __init__(self, a: int = 1, b: str = "x") -> None:
            self.save_hyperparameters()
            super().__init__()
            self.layer = nn.Linear(1, 1)

    early = Early()
    assert (early.hparams, early.hparams_initial, early._log_hyperparams) == (
        {"a": 1, "b": "x"},
        {"a": 1, "b": "x"},
        False,
    )


def test_the_mixin_alone_and_the_attribute_dict() -> None:
    class Plain(HyperparametersMixin):
        def __init__(self, a: int = 1, b: int = 2) -> None:
            super().__init__()
            self.save_hyperparameters()

    plain = Plain()
    assert plain.hparams.a == 1 and repr(plain.hparams) == '"a": 1\n"b": 2'
    assert repr(AttributeDict(longer="x", b=1)) == '"b":      1\n"longer": x'  # sorted, values aligned
    assert plain.hparams_initial is not plain.hparams_initial  # a fresh copy each time
    with pytest.raises(AttributeError, match="'AttributeDict' object has no attribute 'zzz'"):
        _ = plain.hparams.zzz
    assert repr(AttributeDict()) == ""


# ---- OmegaConf configs -------------------------------------------------------------------------------------------


class FromConfig(TinyModel):
    def __init__(self, cfg: DictConfig) -> None:
        super().__init__()
        self.save_hyperparameters(cfg)


def test_a_dictconfig_stays_one_in_hparams_the_checkpoint_and_the_loaded_module(tmp_path: Path) -> None:
    cfg = OmegaConf.create({"lr": 0.1, "net": {"width": 3}, "ref": "${lr}"})
    model = FromConfig(cfg)
    assert model.hparams is cfg and isinstance(model.hparams_initial, DictConfig)
    logger = MemoryLogger()
    trainer = _fit(tmp_path, model, logger=logger)
    assert logger.hparams == [{"lr": 0.1, "net": {"width": 3}, "ref": 0.1}]  # resolved, a plain dict
    path = tmp_path / "cfg.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)
    assert (saved["hparams_name"], saved["hparams_type"]) == ("cfg", DictConfig)
    assert isinstance(saved["hyper_parameters"], DictConfig)
    with pytest.raises(pickle.UnpicklingError):
        FromConfig.load_from_checkpoint(path)  # torch's safe unpickling refuses the config's class
    loaded = FromConfig.load_from_checkpoint(path, weights_only=False, lr=0.7)
    assert isinstance(loaded.hparams, DictConfig)
    assert OmegaConf.to_container(loaded.hparams) == {"lr": 0.7, "net": {"width": 3}, "ref": "${lr}"}


def test_a_dictconfig_argument_among_others_is_a_value_of_a_plain_checkpoint_entry(tmp_path: Path) -> None:
    class Takes(TinyModel):
        def __init__(self, cfg: DictConfig, n: int = 1) -> None:
            super().__init__()
            self.save_hyperparameters()

    model = Takes(OmegaConf.create({"a": 1}))
    assert type(model.hparams) is AttributeDict and isinstance(model.hparams.cfg, DictConfig)
    saved = torch.load(_saved(tmp_path, model), weights_only=False)
    assert type(saved["hyper_parameters"]) is dict and "hparams_type" not in saved


# ---- load_from_checkpoint --------------------------------------------------------------------------------------


def test_keyword_overrides_replace_saved_values_and_reach_init(tmp_path: Path) -> None:
    path = _saved(tmp_path, Saves(lr=0.5, extra="e"))
    saved = torch.load(path, weights_only=False)
    assert (saved["hparams_name"], saved["hyper_parameters"]) == ("kwargs", {"lr": 0.5, "hidden": 4, "extra": "e"})
    assert Saves.load_from_checkpoint(path).hparams == {"lr": 0.5, "hidden": 4, "extra": "e"}
    loaded = Saves.load_from_checkpoint(path, map_location="cpu", strict=True, lr=0.9, new=1)
    assert loaded.hparams == {"lr": 0.9, "hidden": 4, "extra": "e", "new": 1}

    class TakesLr(TinyModel):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()

    assert TakesLr.load_from_checkpoint(path, unknown=3).hparams == {"lr": 0.5}  # names __init__ lacks are dropped


def test_a_star_args_star_kwargs_init_gets_every_saved_value_and_override(tmp_path: Path) -> None:
    class Anything(TinyModel):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()
            self.received = (args, kwargs)
            self.save_hyperparameters()

    path = _saved(tmp_path, Anything(lr=3, name="x"))
    loaded = Anything.load_from_checkpoint(path, lr=4, more=1)
    assert loaded.received == ((), {"lr": 4, "name": "x", "more": 1})
    assert loaded.hparams == {"lr": 4, "name": "x", "more": 1}


def test_a_checkpoint_without_hyperparameters(tmp_path: Path) -> None:
    path = _saved(tmp_path, TinyModel(lr=0.3))
    assert not {key for key in torch.load(path, weights_only=False) if "hparams" in key or "hyper" in key}
    assert TinyModel.load_from_checkpoint(path).layer.weight.shape == (2, 4)
    assert Saves.load_from_checkpoint(path).hparams == {"lr": 0.1, "hidden": 4}  # __init__'s defaults


def test_hparams_file_as_yaml_or_csv_replaces_the_saved_hyperparameters(tmp_path: Path) -> None:
    path = _saved(tmp_path, Saves(lr=0.5))
    save_hparams_to_yaml(tmp_path / "h.yaml", {"lr": 0.01, "hidden": 8})
    save_hparams_to_tags_csv(tmp_path / "h.csv", {"lr": 0.02, "hidden": 9, "s": "txt"})
    assert Saves.load_from_checkpoint(path, hparams_file=tmp_path / "h.yaml").hparams == {"lr": 0.01, "hidden": 8}
    from_csv = Saves.load_from_checkpoint(path, hparams_file=tmp_path / "h.csv")
    assert from_csv.hparams == {"lr": 0.02, "hidden": 9, "s": "txt"}
    with pytest.raises(ValueError, match=r"\.csv, \.yml or \.yaml is required for `hparams_file`"):
        Saves.load_from_checkpoint(path, hparams_file=tmp_path / "h.json")
    with pytest.warns(RuntimeWarning, match="Missing Tags: .*none.csv"):
        assert Saves.load_from_checkpoint(path, hparams_file=tmp_path / "none.csv").hparams == {"lr": 0.1, "hidden": 4}


def test_strict_must_agree_with_the_module_s_strict_loading(tmp_path: Path) -> None:
    path = _saved(tmp_path, Saves())

    class Loose(Saves):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.strict_loading = False
            self.extra = nn.Linear(1, 1)

    with pytest.raises(ValueError, match=r"strict=True\)` which is in conflict with `Loose.strict_loading=False"):
        Loose.load_from_checkpoint(path, strict=True)
    with pytest.warns(UserWarning, match=r"Found keys that are in the model state dict but not in the checkpoint"):
        Loose.load_from_checkpoint(path)
    assert Saves().strict_loading is True


def test_an_empty_state_dict_warns(tmp_path: Path) -> None:
    class NoWeights(L.LightningModule):
        def __init__(self, lr: int = 1) -> None:
            super().__init__()
            self.save_hyperparameters()

    path = tmp_path / "empty.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 2}, "hparams_name": "kwargs"}, path)
    with pytest.warns(UserWarning, match=r"The state dict in .*empty.ckpt' contains no parameters"):
        assert NoWeights.load_from_checkpoint(str(path)).hparams == {"lr": 2}


# ---- the YAML files ----------------------------------------------------------------------------------------------


def test_yaml_files_through_omegaconf(tmp_path: Path) -> None:
    target = tmp_path / "h.yaml"
    save_hparams_to_yaml(target, {"lr": 0.1, "t": (1, 2), "c": OmegaConf.create({"a": 1, "r": "${a}"})})
    assert target.read_text() == "lr: 0.1\nt:\n- 1\n- 2\nc:\n  a: 1\n  r: 1\n"  # in order, configs resolved
    loaded = load_hparams_from_yaml(target)
    assert isinstance(loaded, DictConfig) and OmegaConf.to_container(loaded) == {
        "lr": 0.1,
        "t": [1, 2],
        "c": {"a": 1, "r": 1},
    }
    assert type(load_hparams_from_yaml(target, use_omegaconf=False)) is dict
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert isinstance(load_hparams_from_yaml(tmp_path / "list.yaml"), ListConfig)
    with pytest.raises(TypeError, match="cannot pickle"):
        save_hparams_to_yaml(target, {"lock": threading.Lock()})  # the copy OmegaConf resolves on


def test_yaml_files_without_omegaconf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "h.yaml"
    with pytest.warns(UserWarning, match="Skipping 'lock' parameter because it is not possible to safely dump to YAML"):
        save_hparams_to_yaml(target, {"t": (1, 2), "lock": threading.Lock()}, use_omegaconf=False)
    assert target.read_text() == "t: !!python/tuple\n- 1\n- 2\n"
    monkeypatch.setitem(sys.modules, "omegaconf", None)  # as if it were not installed
    save_hparams_to_yaml(target, argparse.Namespace(b=1, a=2))
    assert target.read_text() == "a: 2\nb: 1\n"
    assert load_hparams_from_yaml(target) == {"a": 2, "b": 1}
    with pytest.raises(TypeError, match="hparams must be dictionary"):
        save_hparams_to_yaml(target, [1, 2])  # type: ignore[arg-type]


def test_no_hyperparameters_write_an_empty_mapping_that_loads_back_empty(tmp_path: Path) -> None:
    target = tmp_path / "h.yaml"
    for empty in ({}, AttributeDict(), argparse.Namespace()):
        for use_omegaconf in (True, False):
            target.unlink(missing_ok=True)
            save_hparams_to_yaml(target, empty, use_omegaconf=use_omegaconf)
            assert target.read_text() == "{}\n"
            assert load_hparams_from_yaml(target) == {} and load_hparams_from_yaml(target, use_omegaconf=False) == {}
    save_hparams_to_yaml(target, OmegaConf.create([]))  # an empty list config stays a list
    assert target.read_text() == "[]\n"


def test_yaml_file_errors(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"Missing folder: .*nope\."):
        save_hparams_to_yaml(tmp_path / "nope" / "h.yaml", {"a": 1})
    with pytest.warns(RuntimeWarning, match=r"Missing Tags: .*absent.yaml\."):
        assert load_hparams_from_yaml(tmp_path / "absent.yaml") == {}


# ---- what the loggers get ----------------------------------------------------------------------------------------


class Data(L.LightningDataModule):
    def __init__(self, bs: int | float = 4, seed: int = 1, log: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters(logger=log)

    def train_dataloader(self) -> Any:
        return make_loader()


class Logs(TinyModel):
    def __init__(self, bs: int = 4, log: bool = True, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters(logger=log)


def _logged(tmp_path: Path, model: L.LightningModule, datamodule: Any = None) -> list[Any]:
    logger = MemoryLogger()
    _fit(tmp_path, model, datamodule, logger=logger)
    return logger.hparams


def test_the_datamodule_s_hyperparameters_are_merged_into_what_loggers_get(tmp_path: Path) -> None:
    assert _logged(tmp_path, Logs(bs=4), Data(bs=4)) == [{"bs": 4, "log": True, "seed": 1}]
    assert _logged(tmp_path, Logs(bs=4, log=False), Data(bs=8)) == [{"bs": 8, "seed": 1, "log": True}]
    assert _logged(tmp_path, Logs(log=False), Data(log=False)) == []
    assert _logged(tmp_path, Logs(_class_path="a.B"), Data(_class_path="c.D")) == [{"bs": 4, "log": True, "seed": 1}]
    assert _logged(tmp_path, TinyModel()) == []  # save_hyperparameters never called: nothing logged

    class SavesNothing(TinyModel):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters()

    assert _logged(tmp_path, SavesNothing()) == [{}]


@pytest.mark.parametrize("datamodule_bs", [8, 4.0])
def test_hyperparameters_colliding_with_the_datamodule_s_are_refused(tmp_path: Path, datamodule_bs: float) -> None:
    with pytest.raises(RuntimeError, match=r"Error while merging hparams: the keys \['bs'\] are present in both"):
        _logged(tmp_path, Logs(bs=4), Data(bs=datamodule_bs))


def test_unpicklable_hyperparameters_are_dropped_with_a_warning_when_a_run_starts(tmp_path: Path) -> None:
    model = Saves(f=lambda x: x)
    with pytest.warns(UserWarning, match=r"Attribute 'f' removed from hparams because it cannot be pickled"):
        _fit(tmp_path, model)
    assert "f" not in model.hparams and "f" in model.hparams_initial


# ---- pickling and copying ----------------------------------------------------------------------------------------


def test_a_fitted_module_pickles_and_copies_without_its_trainer(tmp_path: Path) -> None:
    trainer = _fit(tmp_path, Saves(lr=0.3))
    model = trainer.lightning_module
    assert model.trainer is trainer
    for copied in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert copied._trainer is None and copied.hparams == {"lr": 0.3, "hidden": 4}
        assert torch.equal(copied.layer.weight, model.layer.weight)
        assert (copied.current_epoch, copied.global_step, copied.logger, copied.loggers) == (0, 0, None, [])
        with pytest.raises(RuntimeError, match=r"Saves is not attached to a `Trainer`\."):
            _ = copied.trainer
    assert model.trainer is trainer  # the original keeps it


def test_a_lightning_optimizer_survives_deepcopy(tmp_path: Path) -> None:
    copies: list[Any] = []

    class Copies(TinyModel):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            copies.append(copy.deepcopy(self.optimizers()))
            return super().training_step(batch, batch_idx)

    _fit(tmp_path, Copies())
    assert isinstance(copies[0], LightningOptimizer) and copies[0].param_groups[0]["lr"] == 0.1
    alone = LightningOptimizer(torch.optim.Adam(nn.Linear(1, 1).parameters(), lr=0.5))
    copied = copy.deepcopy(alone)
    assert copied.optimizer is not alone.optimizer and copied.defaults["lr"] == 0.5
