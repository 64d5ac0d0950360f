"""Import paths: every public `lightning.pytorch` path users write has the same path under `statemachine`.

The list below is Lightning 2.6's public surface, kept here by hand (Lightning is not imported). Each name must
resolve, or be refused with `NotSupportedYetError`, whose message says it is not supported yet.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

import statemachine
from statemachine import NotSupportedYetError

# module path (after `lightning.pytorch.`) -> public names users import from it
LIGHTNING_PUBLIC: dict[str, list[str]] = {
    "": ["Callback", "LightningDataModule", "LightningModule", "Trainer", "seed_everything"],
    "callbacks": [
        "BackboneFinetuning",
        "BaseFinetuning",
        "BasePredictionWriter",
        "BatchSizeFinder",
        "Callback",
        "Checkpoint",
        "DeviceStatsMonitor",
        "EarlyStopping",
        "GradientAccumulationScheduler",
        "LambdaCallback",
        "LearningRateFinder",
        "LearningRateMonitor",
        "ModelCheckpoint",
        "ModelPruning",
        "ModelSummary",
        "OnExceptionCheckpoint",
        "ProgressBar",
        "RichModelSummary",
        "RichProgressBar",
        "SpikeDetection",
        "StochasticWeightAveraging",
        "TQDMProgressBar",
        "ThroughputMonitor",
        "Timer",
        "WeightAveraging",
    ],
    "callbacks.callback": ["Callback"],
    "callbacks.checkpoint": ["Checkpoint"],
    "callbacks.early_stopping": ["EarlyStopping"],
    "callbacks.model_checkpoint": ["ModelCheckpoint"],
    "callbacks.model_summary": ["ModelSummary"],
    "callbacks.timer": ["Timer"],
    "callbacks.progress": ["ProgressBar", "RichProgressBar", "TQDMProgressBar"],
    "callbacks.progress.rich_progress": ["RichProgressBar", "RichProgressBarTheme"],
    "callbacks.lr_monitor": ["LearningRateMonitor"],
    "callbacks.on_exception_checkpoint": ["OnExceptionCheckpoint"],
    "callbacks.prediction_writer": ["BasePredictionWriter"],
    "callbacks.gradient_accumulation_scheduler": ["GradientAccumulationScheduler"],
    "callbacks.lambda_function": ["LambdaCallback"],
    "callbacks.finetuning": ["BackboneFinetuning", "BaseFinetuning"],
    "callbacks.stochastic_weight_avg": ["StochasticWeightAveraging"],
    "callbacks.pruning": ["ModelPruning"],
    "callbacks.throughput_monitor": ["ThroughputMonitor"],
    "callbacks.device_stats_monitor": ["DeviceStatsMonitor"],
    "callbacks.rich_model_summary": ["RichModelSummary"],
    "callbacks.progress.progress_bar": ["ProgressBar"],
    "callbacks.progress.tqdm_progress": ["TQDMProgressBar"],
    "loggers": [
        "CSVLogger",
        "CometLogger",
        "Logger",
        "MLFlowLogger",
        "NeptuneLogger",
        "TensorBoardLogger",
        "WandbLogger",
    ],
    "loggers.logger": ["DummyLogger", "Logger", "rank_zero_experiment"],
    "loggers.tensorboard": ["TensorBoardLogger"],
    "loggers.csv_logs": ["CSVLogger"],
    "loggers.mlflow": ["MLFlowLogger"],
    "loggers.wandb": ["WandbLogger"],
    "loggers.comet": ["CometLogger"],
    "core": ["LightningDataModule", "LightningModule"],
    "core.module": ["LightningModule"],
    "core.datamodule": ["LightningDataModule"],
    "core.hooks": ["CheckpointHooks", "DataHooks", "ModelHooks"],
    "core.mixins": ["HyperparametersMixin"],
    "core.optimizer": ["LightningOptimizer"],
    "core.saving": [
        "get_filesystem",
        "load_hparams_from_tags_csv",
        "load_hparams_from_yaml",
        "save_hparams_to_tags_csv",
        "save_hparams_to_yaml",
    ],
    "accelerators": ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator", "XLAAccelerator"],
    "strategies": [
        "DDPStrategy",
        "DeepSpeedStrategy",
        "FSDPStrategy",
        "ModelParallelStrategy",
        "ParallelStrategy",
        "SingleDeviceStrategy",
        "Strategy",
    ],
    "profilers": ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"],
    "plugins": ["CheckpointIO", "DoublePrecision", "HalfPrecision", "MixedPrecision", "TorchCheckpointIO"],
    "plugins.io": ["CheckpointIO", "TorchCheckpointIO"],
    "tuner": ["Tuner"],
    "cli": ["LightningCLI", "SaveConfigCallback"],
    "trainer": ["Trainer"],
    "trainer.states": ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"],
    "utilities": [
        "AttributeDict",
        "is_picklable",
        "CombinedLoader",
        "grad_norm",
        "measure_flops",
        "move_data_to_device",
        "rank_zero_deprecation",
        "rank_zero_info",
        "rank_zero_only",
        "rank_zero_warn",
        "suggested_max_num_workers",
    ],
    "utilities.rank_zero": [
        "rank_zero_debug",
        "rank_zero_deprecation",
        "rank_zero_info",
        "rank_zero_only",
        "rank_zero_warn",
    ],
    "utilities.combined_loader": ["CombinedLoader"],
    "utilities.model_summary": ["ModelSummary", "get_human_readable_count", "summarize"],
    "utilities.seed": ["isolate_rng"],
    "utilities.exceptions": ["MisconfigurationException"],
    "utilities.grads": ["grad_norm"],
    "utilities.model_helpers": ["is_overridden"],
    "utilities.parsing": ["AttributeDict", "get_init_args", "is_picklable"],
    "utilities.data": ["has_len_all_ranks"],
    "utilities.warnings": ["PossibleUserWarning"],
    "utilities.types": ["EVAL_DATALOADERS", "OptimizerLRScheduler", "STEP_OUTPUT", "TRAIN_DATALOADERS"],
    "demos": [
        "BoringDataModule",
        "BoringModel",
        "DemoModel",
        "LightningTransformer",
        "Transformer",
        "WikiText2",
    ],
    "demos.boring_classes": [
        "BoringDataModule",
        "BoringModel",
        "DemoModel",
        "ManualOptimBoringModel",
        "RandomDataset",
        "RandomDictDataset",
        "RandomIterableDataset",
        "RandomIterableDatasetWithLen",
    ],
    "demos.transformer": ["LightningTransformer", "Transformer", "WikiText2"],
    "demos.mnist_datamodule": ["MNIST", "MNISTDataModule"],
}
CASES = [(path, name) for path, names in LIGHTNING_PUBLIC.items() for name in names]


def _resolve(path: str, name: str) -> object:
    module = importlib.import_module(f"statemachine.{path}" if path else "statemachine")
    namespace: dict[str, object] = {}
    # `from X import Y` exactly as a user writes it
    exec(f"from {module.__name__} import {name}", namespace)
    return namespace[name]


@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{p}:{n}" for p, n in CASES])
def test_every_lightning_public_name_resolves_or_is_refused_as_not_supported(path: str, name: str) -> None:
    try:
        value = _resolve(path, name)
    except NotSupportedYetError as refused:
        assert "not supported yet" in str(refused)
        assert name in str(refused)
        return
    assert value is not None


def test_the_supported_core_names_are_the_same_objects_under_every_path() -> None:
    from statemachine.trainer.states import TrainerFn

    from statemachine.callbacks import ModelCheckpoint
    from statemachine.callbacks.model_checkpoint import ModelCheckpoint as Deep
    from statemachine.core import LightningModule
    from statemachine.core.module import LightningModule as DeepModule

    assert ModelCheckpoint is Deep is statemachine.ModelCheckpoint
    assert LightningModule is DeepModule is statemachine.LightningModule
    assert TrainerFn is statemachine.TrainerFn
    assert statemachine.callbacks.EarlyStopping is statemachine.EarlyStopping  # attribute access, no import
    assert statemachine.trainer.Trainer is statemachine.Trainer


def test_strategies_and_cluster_environments_are_the_ones_the_trainer_takes() -> None:
    from statemachine.plugins import SLURMEnvironment
    from statemachine.plugins.environments import SLURMEnvironment as Deep
    from statemachine.strategies import DDPStrategy, SingleDeviceStrategy

    trainer = statemachine.Trainer(accelerator="cpu", strategy=DDPStrategy(), devices=2, plugins=[SLURMEnvironment()])
    assert type(trainer.strategy) is DDPStrategy and SLURMEnvironment is Deep
    assert type(trainer.strategy.cluster_environment) is SLURMEnvironment
    assert type(statemachine.Trainer(accelerator="cpu").strategy) is SingleDeviceStrategy


def test_a_refused_name_is_an_import_error_naming_the_reason() -> None:
    with pytest.raises(ImportError, match=r"statemachine\.loggers\.NeptuneLogger is not supported yet"):
        from statemachine.loggers import NeptuneLogger  # noqa: F401


def test_an_unknown_name_is_a_plain_import_error() -> None:
    with pytest.raises(ImportError, match="cannot import name 'NoSuchCallback'") as caught:
        from statemachine.callbacks import NoSuchCallback  # noqa: F401
    assert not isinstance(caught.value, NotSupportedYetError)


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_statemachine_stays_lazy() -> None:
    out = _run(
        """
        import sys
        import statemachine, statemachine.callbacks, statemachine.loggers, statemachine.utilities
        print(sorted(m for m in ("torch", "stages.module", "tensorboard") if m in sys.modules))
        """
    )
    assert out.strip() == "[]"


def test_trainer_states_imports_first_in_a_fresh_process() -> None:
    out = _run(
        """
        from statemachine.trainer.states import RunningStage, TrainerFn
        import statemachine.trainer.states as states
        print(TrainerFn.FITTING == "fit", states.RunningStage is RunningStage)
        """
    )
    assert out.split() == ["True", "True"]


LIGHTNING_SCRIPT = """
import torch
from torch.utils.data import DataLoader

import lightning.pytorch as pl
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.callbacks.progress import TQDMProgressBar
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.combined_loader import CombinedLoader


class Model(BoringModel):
    def training_step(self, batch, batch_idx):
        loss = self.step(batch["a"]) + self.step(batch["b"])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("valid_loss", self.step(batch))


seed_everything(7)
loaders = CombinedLoader(
    {"a": DataLoader(RandomDataset(32, 8), batch_size=2), "b": DataLoader(RandomDataset(32, 4), batch_size=2)},
    mode="max_size_cycle",
)
trainer = Trainer(
    max_epochs=2,
    logger=CSVLogger(SAVE_DIR),
    default_root_dir=SAVE_DIR,
    callbacks=[ModelCheckpoint(monitor="valid_loss"), EarlyStopping("valid_loss"), TQDMProgressBar()],
)
trainer.fit(Model(), loaders, DataLoader(RandomDataset(32, 4)))
rank_zero_info("done")
assert isinstance(trainer.lightning_module, pl.LightningModule)
print(trainer.state.fn == TrainerFn.FITTING, trainer.global_step)
"""


def test_a_lightning_script_runs_after_rewriting_its_imports(tmp_path: Path) -> None:
    script = LIGHTNING_SCRIPT.replace("SAVE_DIR", repr(str(tmp_path)))
    rewritten = script.replace("lightning.pytorch", "statemachine")
    out = _run(rewritten)
    # 4 combined batches per epoch (the longer loader, the shorter one cycled), 2 epochs
    assert out.split()[-2:] == ["True", "8"]
    assert (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").is_file()


def test_star_import_and_dir_list_the_supported_names() -> None:
    namespace: dict[str, object] = {}
    exec("from statemachine.callbacks import *", namespace)
    assert {"ModelCheckpoint", "EarlyStopping", "Callback"} <= set(namespace)
    assert "NeptuneLogger" not in dir(statemachine.loggers) and "WandbLogger" in dir(statemachine.loggers)
    assert {"callbacks", "loggers", "utilities", "demos"} <= set(dir(statemachine))
