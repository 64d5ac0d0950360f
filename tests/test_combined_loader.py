"""CombinedLoader: Lightning's four modes, and the loops accepting it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from statemachine.utilities import CombinedLoader
from tests.conftest import TinyModel, quiet_trainer


def _iterables() -> dict[str, DataLoader]:
    return {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)}


def _as_lists(batch: Any) -> Any:
    if isinstance(batch, dict):
        return {key: _as_lists(value) for key, value in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_as_lists(value) for value in batch)
    return None if batch is None else batch.tolist()


def _drain(loader: CombinedLoader) -> list[tuple[Any, int, int]]:
    return [(_as_lists(batch), batch_idx, dataloader_idx) for batch, batch_idx, dataloader_idx in loader]


def test_max_size_cycle_runs_as_long_as_the_longest_and_restarts_the_shorter() -> None:
    loader = CombinedLoader(_iterables(), "max_size_cycle")
    assert len(loader) == 3
    assert _drain(loader) == [
        ({"a": [0, 1, 2, 3], "b": [0, 1, 2, 3, 4]}, 0, 0),
        ({"a": [4, 5], "b": [5, 6, 7, 8, 9]}, 1, 0),
        ({"a": [0, 1, 2, 3], "b": [10, 11, 12, 13, 14]}, 2, 0),
    ]


def test_min_size_stops_with_the_shortest() -> None:
    loader = CombinedLoader(_iterables(), "min_size")
    assert len(loader) == 2
    assert _drain(loader) == [
        ({"a": [0, 1, 2, 3], "b": [0, 1, 2, 3, 4]}, 0, 0),
        ({"a": [4, 5], "b": [5, 6, 7, 8, 9]}, 1, 0),
    ]


def test_min_size_is_the_default_mode() -> None:
    assert CombinedLoader(_iterables()).mode == "min_size"


def test_max_size_gives_none_for_an_exhausted_iterable() -> None:
    loader = CombinedLoader(_iterables(), "max_size")
    assert len(loader) == 3
    assert _drain(loader)[-1] == ({"a": None, "b": [10, 11, 12, 13, 14]}, 2, 0)


def test_sequential_runs_the_iterables_one_after_the_other() -> None:
    loader = CombinedLoader(_iterables(), "sequential")
    assert len(loader) == 5
    assert _drain(loader) == [
        ([0, 1, 2, 3], 0, 0),
        ([4, 5], 1, 0),
        ([0, 1, 2, 3, 4], 0, 1),
        ([5, 6, 7, 8, 9], 1, 1),
        ([10, 11, 12, 13, 14], 2, 1),
    ]


def test_a_list_keeps_its_structure_and_limits_cap_each_iterable() -> None:
    loader = CombinedLoader([DataLoader(range(4)), DataLoader(range(10, 16))], "max_size_cycle")
    loader.limits = [2, 3]
    assert len(loader) == 3
    assert [_as_lists(batch) for batch, _, _ in loader] == [[[0], [10]], [[1], [11]], [[0], [12]]]
    assert loader.flattened[1].dataset == range(10, 16)


def test_bad_mode_and_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="'biggest' is not one of 'min_size', 'max_size_cycle'"):
        CombinedLoader(_iterables(), "biggest")
    with pytest.raises(ValueError, match="3 values for 2 iterables"):
        CombinedLoader(_iterables()).limits = [1, 2, 3]


def _loader(n: int, value: float) -> DataLoader:
    x = torch.full((n, 4), value)
    return DataLoader(TensorDataset(x, torch.zeros(n, dtype=torch.long)), batch_size=2)


class PairModel(TinyModel):
    """Trains on batches that are dicts of two (x, y) batches; records what each step received."""

    def __init__(self) -> None:
        super().__init__()
        self.train_batches: list[Any] = []
        self.val_seen: list[tuple[int, int]] = []
        self.train_dataloader_seen: Any = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.train_dataloader_seen = self.trainer.train_dataloader
        self.train_batches.append({key: None if b is None else b[0][0, 0].item() for key, b in batch.items()})
        losses = [super(PairModel, self).training_step(b, batch_idx) for b in batch.values() if b is not None]
        return sum(losses)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.val_seen.append((batch_idx, dataloader_idx))


@pytest.mark.parametrize(("mode", "steps"), [("max_size_cycle", 3), ("min_size", 1), ("max_size", 3)])
def test_fit_accepts_a_combined_loader_in_each_training_mode(tmp_path: Path, mode: str, steps: int) -> None:
    model = PairModel()
    combined = CombinedLoader({"short": _loader(2, 1.0), "long": _loader(6, 2.0)}, mode)
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(model, combined)
    assert trainer.global_step == steps
    assert model.train_dataloader_seen is combined.iterables  # the loaders as given, not the wrapper
    expected_short = {"max_size_cycle": [1.0, 1.0, 1.0], "min_size": [1.0], "max_size": [1.0, None, None]}[mode]
    assert [batch["short"] for batch in model.train_batches] == expected_short


def test_a_dict_of_training_loaders_is_combined_in_max_size_cycle_mode(tmp_path: Path) -> None:
    model = PairModel()
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(model, {"short": _loader(2, 1.0), "long": _loader(6, 2.0)})
    assert trainer.global_step == 3
    assert trainer.num_training_batches == 3


def test_limit_train_batches_applies_to_each_combined_iterable(tmp_path: Path) -> None:
    model = PairModel()
    trainer = quiet_trainer(tmp_path, max_epochs=1, limit_train_batches=2)
    trainer.fit(model, CombinedLoader({"short": _loader(2, 1.0), "long": _loader(8, 2.0)}, "max_size_cycle"))
    assert trainer.num_training_batches == 2
    assert trainer.global_step == 2


def test_sequential_mode_is_refused_for_training(tmp_path: Path) -> None:
    combined = CombinedLoader([_loader(2, 1.0), _loader(4, 2.0)], "sequential")
    started: list[int] = []

    class StartsEpochs(PairModel):
        def on_train_epoch_start(self) -> None:
            started.append(self.current_epoch)

    # Lightning's ValueError, once the epoch has started
    with pytest.raises(ValueError, match=r'`_FitLoop` does not support the `CombinedLoader\(mode="sequential"\)` mode'):
        quiet_trainer(tmp_path, max_epochs=1).fit(StartsEpochs(), combined)
    assert started == [0]


def test_validation_runs_a_sequential_combined_loader_as_separate_dataloaders(tmp_path: Path) -> None:
    model = PairModel()
    combined = CombinedLoader([_loader(4, 1.0), _loader(2, 2.0)], "sequential")
    quiet_trainer(tmp_path).validate(model, combined, verbose=False)
    assert model.val_seen == [(0, 0), (1, 0), (0, 1)]


def test_evaluation_with_a_max_size_combined_loader_gives_combined_batches(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Eval(TinyModel):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            seen.append((batch_idx, sorted(key for key, value in batch.items() if value is not None)))

    combined = CombinedLoader({"a": _loader(2, 1.0), "b": _loader(4, 2.0)}, "max_size")
    quiet_trainer(tmp_path).test(Eval(), combined, verbose=False)
    assert seen == [(0, ["a", "b"]), (1, ["b"])]
