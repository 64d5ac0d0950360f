"""Helpers Lightning code imports from `utilities` and `core.saving`, with what Lightning 2.6.6 returns for them."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import quiet_trainer
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from torch.utils.data import DataLoader, IterableDataset

from statemachine.core.saving import get_filesystem, load_hparams_from_tags_csv, save_hparams_to_tags_csv
from statemachine.utilities import is_picklable
from statemachine.utilities.data import has_len_all_ranks
from statemachine.utilities.parsing import get_init_args


class Base:
    def __init__(self, a: int, b: int = 2, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        unrelated = 5  # noqa: F841 - a local that is not an argument
        self.seen = get_init_args(sys._getframe())


class Child(Base):
    def __init__(self, z: int, **kwargs: Any) -> None:
        super().__init__(1, **kwargs)
        self.own = get_init_args(sys._getframe())


class NoSuper:
    def __init__(self, a: int) -> None:
        self.seen = get_init_args(sys._getframe())


def test_get_init_args_gives_an_init_s_arguments_with_its_keywords_merged_in() -> None:
    assert Base(1, 3, 4, 5, c=6).seen == {"a": 1, "b": 3, "c": 6}
    child = Child(9, q=1)
    assert (child.seen, child.own) == ({"a": 1, "b": 2, "q": 1}, {"z": 9, "q": 1})
    assert NoSuper(1).seen == {}  # no super(): not an init Lightning collects from


def test_is_picklable() -> None:
    assert is_picklable({"a": 1}) and is_picklable(Base)
    assert not is_picklable(lambda x: x) and not is_picklable(threading.Lock())


class Stream(IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(3))


def test_has_len_all_ranks(tmp_path: Path) -> None:
    strategy = quiet_trainer(tmp_path).strategy
    assert has_len_all_ranks(DataLoader(list(range(4))), strategy)
    with pytest.warns(UserWarning, match="Total length of `DataLoader` across ranks is zero"):
        assert has_len_all_ranks(DataLoader([]), strategy)
    assert not has_len_all_ranks(DataLoader(Stream()), strategy)
    assert not has_len_all_ranks(iter([1]), strategy)


def test_tags_csv_round_trip_and_its_refusals(tmp_path: Path) -> None:
    path = tmp_path / "tags.csv"
    save_hparams_to_tags_csv(path, {"lr": 0.1, "name": "x y", "layers": [1, 2], "flag": True, "none": None})
    assert path.read_text() == 'key,value\nlr,0.1\nname,x y\nlayers,"[1, 2]"\nflag,True\nnone,\n'
    # what is a Python literal comes back as one; None was written empty and comes back as text
    assert load_hparams_from_tags_csv(path) == {"lr": 0.1, "name": "x y", "layers": [1, 2], "flag": True, "none": ""}
    save_hparams_to_tags_csv(path, argparse.Namespace(a=1))
    assert load_hparams_from_tags_csv(path) == {"a": 1}
    with pytest.warns(UserWarning, match="Missing Tags"):
        assert load_hparams_from_tags_csv(tmp_path / "missing.csv") == {}
    with pytest.raises(RuntimeError, match="Missing folder"):
        save_hparams_to_tags_csv(tmp_path / "no" / "tags.csv", {"a": 1})


def test_get_filesystem_is_the_paths_fsspec_filesystem(tmp_path: Path) -> None:
    assert isinstance(get_filesystem(tmp_path), LocalFileSystem)
    assert isinstance(get_filesystem("memory://bucket/file"), MemoryFileSystem)
