"""`import statemachine.as_lightning`: Lightning's import paths resolve to this project in that process, ahead of
an installed Lightning (the dev extra installs one, pulled in by the libraries built on it). Each case runs in a
fresh interpreter, as the alias stays on for the rest of a process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import REPO


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _ok(code: str) -> subprocess.CompletedProcess[str]:
    result = _run(code)
    assert result.returncode == 0, result.stderr
    return result


def test_every_spelling_of_lightning_is_the_same_statemachine_module() -> None:
    result = _ok(
        """
        import statemachine.as_lightning
        import lightning.pytorch as pl, pytorch_lightning, lightning, statemachine
        from lightning import Trainer, LightningModule
        from lightning.pytorch.callbacks.early_stopping import EarlyStopping
        from pytorch_lightning.callbacks import ModelCheckpoint
        from lightning.pytorch.trainer.states import RunningStage
        from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm
        from lightning.pytorch.utilities.parsing import get_init_args
        import statemachine.callbacks, statemachine.trainer.states
        print(pl is statemachine, pytorch_lightning is statemachine, lightning.pytorch is statemachine)
        print(Trainer is statemachine.Trainer, LightningModule is statemachine.LightningModule)
        print(EarlyStopping is statemachine.EarlyStopping, ModelCheckpoint is statemachine.callbacks.ModelCheckpoint)
        print(RunningStage is statemachine.trainer.states.RunningStage, Tqdm.__module__, get_init_args.__module__)
        import sys
        real = ("/lightning/", "/pytorch_lightning/", "/lightning_fabric/")
        print(sorted(n for n, m in sys.modules.items() if any(r in (getattr(m, "__file__", None) or "") for r in real)))
        """
    )
    assert result.stdout.split("\n")[:4] == [
        "True True True",
        "True True",
        "True True",
        "True stages.callbacks.progress stages.hparams",
    ]
    assert result.stdout.split("\n")[4] == "[]", "the installed Lightning's packages must not be imported"


def test_the_fabric_helpers_trainer_code_imports_resolve() -> None:
    result = _ok(
        """
        import statemachine.as_lightning
        from lightning.fabric.utilities.types import _PATH, _MAP_LOCATION_TYPE
        from lightning_fabric.utilities.seed import seed_everything
        from lightning_fabric.utilities.cloud_io import get_filesystem
        from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
        from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO
        from lightning_fabric.utilities.rank_zero import rank_zero_only
        import lightning_fabric, statemachine, statemachine.plugins
        print(seed_everything is statemachine.seed_everything is lightning_fabric.seed_everything)
        print(TorchCheckpointIO is statemachine.plugins.TorchCheckpointIO, issubclass(TorchCheckpointIO, CheckpointIO))
        print(type(get_filesystem("memory://x")).__name__)
        """
    )
    assert result.stdout.split() == ["True", "True", "True", "MemoryFileSystem"]


@pytest.mark.parametrize(
    ("statement", "words"),
    [
        (
            "import pytorch_lightning.nope",
            "No module named 'pytorch_lightning.nope': statemachine.as_lightning maps it",
        ),
        ("from lightning.pytorch.nope import x", "No module named 'lightning.pytorch.nope'"),
        ("import lightning.fabric.strategies", "No module named 'lightning.fabric.strategies'"),
        ("import lightning.app", "Fabric itself is not provided"),
        ("from lightning import Fabric", "cannot import name 'Fabric'"),
    ],
)
def test_a_path_the_project_lacks_is_refused_not_taken_from_the_installed_lightning(statement: str, words: str) -> None:
    result = _run(f"import statemachine.as_lightning\n{statement}")
    assert result.returncode == 1
    assert "ModuleNotFoundError" in result.stderr or "ImportError" in result.stderr
    assert words in result.stderr
    assert "site-packages/lightning" not in result.stderr and "site-packages/pytorch_lightning" not in result.stderr


def test_an_installed_lightning_is_named_once_when_the_alias_takes_over() -> None:
    result = _ok(
        """
        import statemachine.as_lightning
        import importlib
        importlib.reload  # a second import of the alias module is a no-op
        import statemachine.as_lightning
        import lightning.pytorch, pytorch_lightning
        """
    )
    assert result.stderr.count("LightningAliasWarning") == 1
    assert "now resolve to statemachine; the installed lightning 2.6.6" in result.stderr


def test_turning_the_alias_on_after_lightning_was_imported_is_refused() -> None:
    result = _run("import pytorch_lightning\nimport statemachine.as_lightning")
    assert result.returncode == 1
    assert (
        "statemachine.as_lightning was imported after lightning_fabric, pytorch_lightning: import it first"
        in result.stderr
    )


def test_a_model_written_for_lightning_trains_through_the_alias(tmp_path: object) -> None:
    result = _ok(
        f"""
        import statemachine.as_lightning
        import torch
        import lightning.pytorch as pl
        from lightning.pytorch.demos.boring_classes import BoringModel
        import statemachine
        trainer = pl.Trainer(max_steps=3, logger=False, enable_progress_bar=False, default_root_dir={str(tmp_path)!r})
        trainer.fit(BoringModel())
        print("result", type(trainer) is statemachine.Trainer, trainer.global_step, trainer.state.finished)
        """
    )
    assert result.stdout.splitlines()[-1].split() == ["result", "True", "3", "True"]
