"""LightningDataModule: data preparation, splits and loaders in one reusable object."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from stages import saving
from stages.class_only import class_only
from stages.combined_loader import CombinedLoader
from stages.data_hooks import DataHooks
from stages.hparams import HyperparametersMixin


def _dataset_size(loader: Any) -> str:
    try:
        return f"size={len(loader.dataset)}"
    except (AttributeError, TypeError):  # no dataset, or one without a length (an IterableDataset)
        return "size=NA"


class LightningDataModule(DataHooks, HyperparametersMixin):
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    def __init__(self) -> None:
        self.trainer: Any = None
        self._init_data_hooks()
        self._init_hparams()

    def __str__(self) -> str:
        """Lightning's description of the loaders: one `{Train dataloader: size=N}` line per kind, the size being
        each loader's dataset length (`NA` without one, `1. size=N ; 2. size=M` for several loaders, `None` where
        the hook gives none yet)."""
        kinds = (("train", "Train"), ("val", "Validation"), ("test", "Test"), ("predict", "Predict"))
        return "\n".join(f"{{{title} dataloader: {self._describe_loaders(kind)}}}" for kind, title in kinds)

    def _describe_loaders(self, kind: str) -> str:
        try:
            loaders = getattr(self, f"{kind}_dataloader")()
        except Exception:  # not implemented, switched off, or its data is not set up yet: Lightning shows None
            return "None"
        if isinstance(loaders, CombinedLoader):
            loaders = loaders.iterables
        if isinstance(loaders, Mapping):
            loaders = list(loaders.values())
        if loaders is None:
            return "None"
        if not isinstance(loaders, list | tuple):
            return _dataset_size(loaders)
        return " ; ".join(f"{index}. {_dataset_size(loader)}" for index, loader in enumerate(loaders, 1))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (override both)."""

    def on_exception(self, exception: BaseException) -> None:
        """Called when a run fails (override it)."""

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Dataset | Sequence[Dataset] | Mapping[str, Dataset] | None = None,
        val_dataset: Dataset | Sequence[Dataset] | None = None,
        test_dataset: Dataset | Sequence[Dataset] | None = None,
        predict_dataset: Dataset | Sequence[Dataset] | None = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> LightningDataModule:
        """A DataModule serving the given datasets (each may also be a list or dict of datasets, giving a list or
        dict of loaders). The training loaders shuffle (unless the dataset is iterable); `batch_size` and
        `num_workers` go to every loader, and to the constructor when it takes them, with `datamodule_kwargs`."""

        def loader(dataset: Dataset, shuffle: bool) -> DataLoader:
            return DataLoader(
                dataset,
                batch_size=batch_size,
                shuffle=shuffle and not isinstance(dataset, IterableDataset),
                num_workers=num_workers,
                pin_memory=torch.cuda.is_available(),
            )

        def loaders(datasets: Any, shuffle: bool) -> Any:
            if isinstance(datasets, Mapping):
                return {key: loader(dataset, shuffle) for key, dataset in datasets.items()}
            if isinstance(datasets, Sequence) and not isinstance(datasets, Dataset):
                return [loader(dataset, shuffle) for dataset in datasets]
            return loader(datasets, shuffle)

        parameters = inspect.signature(cls.__init__).parameters
        candidates = {"batch_size": batch_size, "num_workers": num_workers}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            candidates = {key: value for key, value in candidates.items() if key in parameters}
        datamodule = cls(**datamodule_kwargs, **candidates)
        # set on the instance, as Lightning does: the trainer honours hooks assigned to a DataModule instance
        for kind, datasets, shuffle in (
            ("train", train_dataset, True),
            ("val", val_dataset, False),
            ("test", test_dataset, False),
            ("predict", predict_dataset, False),
        ):
            if datasets is not None:
                setattr(datamodule, f"{kind}_dataloader", lambda d=datasets, s=shuffle: loaders(d, s))
        return datamodule

    @class_only
    def load_from_checkpoint(
        cls: Any,
        checkpoint_path: str | os.PathLike[str],
        map_location: Any = None,
        hparams_file: str | os.PathLike[str] | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> LightningDataModule:
        """Build the DataModule from the hyperparameters a checkpoint saved for it (replaced by `hparams_file`,
        overridden by `kwargs`), then load its `state_dict` when the checkpoint holds one."""
        return saving.load_from_checkpoint(
            cls, checkpoint_path, map_location, hparams_file, None, weights_only, **kwargs
        )
