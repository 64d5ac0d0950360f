"""WandbLogger against the real W&B client, offline: each test reads back what the offline run folder holds (the
`.wandb` transaction log and the run's `files/`) and checks it against what Lightning 2.6.6's WandbLogger leaves
there for the same script. W&B records a run's outcome when the process ends, so the fits whose outcome is checked
run as a user's script (`tests/scripts/wandb_fit.py`) in their own process."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import pickle
import struct
import subprocess
import sys
import wave
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import wandb
from conftest import REPO, TinyModel, make_loader, quiet_trainer
from PIL import Image
from wandb.proto import wandb_internal_pb2 as pb

from stages.exceptions import MisconfigurationException, TrainerWarning
from stages.loggers.logger import NoExperiment
from stages.rank_zero import rank_zero_only
from statemachine.callbacks import ModelCheckpoint
from statemachine.loggers import WandbLogger

SCRIPT = REPO / "tests" / "scripts" / "wandb_fit.py"
SCRIPT_HPARAMS = {"lr": 0.1, "optimizer": {"name": "sgd", "momentum": 0.0}, "fail_at_step": -1}
# What Lightning's WandbLogger logs for the script's fit (4 batches an epoch, 2 epochs, metrics every 2 steps,
# validation after each epoch) and its test: W&B's own `_step` counts rows, `trainer/global_step` is the
# trainer's step, which a row logged at the end of an epoch shares with that epoch's last training row.
LIGHTNING_FIT_ROWS = [
    {"_step": 0, "trainer/global_step": 1, "epoch": 0, "train_loss": float},
    {"_step": 1, "trainer/global_step": 3, "epoch": 0, "train_loss": float},
    {"_step": 2, "trainer/global_step": 3, "epoch": 0, "val_loss": float},
    {"_step": 3, "trainer/global_step": 5, "epoch": 1, "train_loss": float},
    {"_step": 4, "trainer/global_step": 7, "epoch": 1, "train_loss": float},
    {"_step": 5, "trainer/global_step": 7, "epoch": 1, "val_loss": float},
]
LIGHTNING_TEST_ROW = {"_step": 6, "trainer/global_step": 8, "epoch": 2, "test_acc": float}


# ---- reading an offline run -------------------------------------------------------------------------------------

_BLOCK = 32768  # the transaction log is LevelDB's log format: 32 KiB blocks of framed chunks
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> Iterator[pb.Record]:
    """The protobuf records of a `.wandb` file, each chunk's checksum verified."""
    data = path.read_bytes()
    assert data[:7] == struct.pack("<4sHB", b":W&B", 0xBEE1, 0), f"{path} is not a W&B transaction log"
    position, pending = 7, b""
    while position + 7 <= len(data):
        left_in_block = _BLOCK - position % _BLOCK
        checksum, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left_in_block < 7 or (checksum, length, kind) == (0, 0, 0):
            position += left_in_block  # the rest of the block is padding
            continue
        chunk = data[position + 7 : position + 7 + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == checksum, f"corrupt record at byte {position}"
        position += 7 + length
        if kind in (_FULL, _FIRST):
            pending = b""
        pending += chunk
        if kind in (_FULL, _LAST):
            yield pb.Record.FromString(pending)


@dataclass
class OfflineRun:
    folder: Path
    records: list[pb.Record] = field(repr=False)

    def of(self, kind: str) -> list[Any]:
        return [getattr(record, kind) for record in self.records if record.WhichOneof("record_type") == kind]

    @property
    def run(self) -> Any:
        (run,) = self.of("run")
        return run

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The history rows, without W&B's clock columns (`_timestamp`, `_runtime`)."""
        return [_row(history) for history in self.of("history")]

    @property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        for update in [*self.run.config.update, *(item for c in self.of("config") for item in c.update)]:
            config[update.key or "/".join(update.nested_key)] = json.loads(update.value_json)
        config.pop("_wandb")
        return config

    def artifacts(self, kind: str) -> list[Any]:
        return [artifact for artifact in self.of("artifact") if artifact.type == kind]

    @property
    def exit_code(self) -> int:
        (exit_record,) = self.of("exit")
        return exit_record.exit_code

    @property
    def files(self) -> Path:
        return self.folder / "files"

    def sequence(self) -> list[str]:
        """The history rows and artifacts in the order they were logged: a row by its metric names, an artifact
        as `artifact:<original file name>`."""
        order = []
        for record in self.records:
            kind = record.WhichOneof("record_type")
            if kind == "history":
                order.append(",".join(sorted(_row(record.history).keys() - {"_step", "epoch", "trainer/global_step"})))
            elif kind == "artifact" and record.artifact.type == "model":
                order.append(f"artifact:{json.loads(record.artifact.metadata)['original_filename']}")
        return order


def _row(history: Any) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for item in history.item:
        *parents, leaf = item.nested_key or [item.key]
        if not parents and leaf in ("_timestamp", "_runtime"):
            continue
        target = row
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = json.loads(item.value_json)
    return row


def offline_runs(wandb_dir: Path) -> list[OfflineRun]:
    folders = sorted((wandb_dir / "wandb").glob("offline-run-*"))
    return [OfflineRun(folder, list(wandb_records(next(folder.glob("run-*.wandb"))))) for folder in folders]


def only_run(wandb_dir: Path) -> OfflineRun:
    runs = offline_runs(wandb_dir)
    assert len(runs) == 1, [run.folder.name for run in runs]
    return runs[0]


def assert_rows(rows: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Same rows, same keys, same steps; `float` stands for any float."""
    assert [set(row) for row in rows] == [set(row) for row in expected]
    for row, want in zip(rows, expected, strict=True):
        for key, value in want.items():
            if value is float:
                assert isinstance(row[key], float), (key, row)
            else:
                assert row[key] == value, (key, row)


def manifest(artifact: Any) -> dict[str, Any]:
    return {entry.path: entry for entry in artifact.manifest.contents}


def md5_base64(path: Path | str) -> str:
    return base64.b64encode(hashlib.md5(Path(path).read_bytes()).digest()).decode()


# ---- environment ------------------------------------------------------------------------------------------------


def offline_environment(root: Path) -> dict[str, str]:
    """W&B offline, quiet, every folder it writes under `root`, and a server address where nothing listens, so
    that a request that should not happen fails here instead of reaching the internet."""
    return {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(root),
        "WANDB_DATA_DIR": str(root / "wandb-data"),
        "WANDB_CACHE_DIR": str(root / "wandb-cache"),
        "WANDB_CONFIG_DIR": str(root / "wandb-config"),
        "WANDB_BASE_URL": "http://127.0.0.1:9",
        "WANDB_CONSOLE": "off",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB__DISABLE_STATS": "true",
        "WANDB__DISABLE_META": "true",
    }


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's W&B offline under `tmp_path` (also the working directory). wandb reads the environment once
    per process setup, so each test ends its runs and tears the setup (and wandb's service process) down."""
    for variable in [name for name in os.environ if name.startswith("WANDB_")]:
        monkeypatch.delenv(variable)
    for variable, value in offline_environment(tmp_path).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        end_wandb()


def end_wandb() -> None:
    """Finish the active run and shut this process's W&B service down: `finish` can return before the service
    has written the run's transaction log out, shutting it down waits for that."""
    wandb.finish()
    wandb.teardown()


def run_script(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root.mkdir(parents=True, exist_ok=True)
    clean = {name: value for name, value in os.environ.items() if not name.startswith("WANDB_")}
    env = {**clean, **offline_environment(root), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-W", "error::stages.exceptions.TrainerWarning", str(SCRIPT), str(root), *args]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=180, check=False)


@dataclass
class ScriptRun:
    process: subprocess.CompletedProcess[str]
    said: dict[str, Any]
    run: OfflineRun


def script_run(root: Path, *args: str) -> ScriptRun:
    process = run_script(root, *args)
    said = json.loads((root / "script.json").read_text())
    return ScriptRun(process, said, only_run(root))


@pytest.fixture(scope="module")
def fit_then_test(tmp_path_factory: pytest.TempPathFactory) -> ScriptRun:
    """The script's fit, then a test, with log_model=True; it finishes."""
    done = script_run(tmp_path_factory.mktemp("fit_then_test"), "--log-model", "true", "--test")
    assert done.process.returncode == 0, done.process.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def failing_fit(tmp_path_factory: pytest.TempPathFactory) -> ScriptRun:
    """The script's fit with log_model=True, raising in training_step at global step 3."""
    done = script_run(tmp_path_factory.mktemp("failing_fit"), "--log-model", "true", "--fail")
    assert done.process.returncode == 1, done.process.stderr[-3000:]
    assert "Boom: failed at step 3" in done.process.stderr
    return done


# ---- what a user's script leaves in the offline run -------------------------------------------------------------


def test_a_fit_then_a_test_log_lightnings_rows_to_one_run(fit_then_test: ScriptRun) -> None:
    run = fit_then_test.run
    assert_rows(run.rows, [*LIGHTNING_FIT_ROWS, LIGHTNING_TEST_ROW])
    val_losses = [row["val_loss"] for row in run.rows if "val_loss" in row]
    assert all(0 < loss < 5 for loss in val_losses)
    # the trainer's step is the x-axis of every metric
    (step_metric, every_metric) = run.of("metric")
    assert step_metric.name == "trainer/global_step"
    assert (every_metric.glob_name, every_metric.step_metric) == ("*", "trainer/global_step")
    assert every_metric.options.step_sync


def test_the_run_is_named_and_identified_as_lightning_does(fit_then_test: ScriptRun) -> None:
    run, said = fit_then_test.run, fit_then_test.said
    assert run.run.run_id == said["version"]
    assert run.folder.name.endswith(f"-{said['version']}")
    assert run.run.display_name == "tiny-run"
    assert run.run.project == said["name"] == "lightning_logs"
    assert run.run.resume  # the same id continues the run
    # checkpoints go to <save_dir>/<project>/<run id>/checkpoints
    save_dir = Path(said["save_dir"])
    assert run.folder.parent == save_dir / "wandb"
    assert Path(said["checkpoint_dir"]) == save_dir / "lightning_logs" / said["version"] / "checkpoints"


def test_the_hyperparameters_are_the_runs_config(fit_then_test: ScriptRun) -> None:
    run = fit_then_test.run
    assert run.config == SCRIPT_HPARAMS
    # logged again as the test starts, with the same values
    assert len(run.of("config")) == 2


def test_a_script_that_finishes_ends_its_run_with_exit_code_0(fit_then_test: ScriptRun) -> None:
    assert fit_then_test.run.exit_code == 0


def test_log_model_true_uploads_the_best_and_the_last_checkpoint_once_the_fit_succeeds(
    fit_then_test: ScriptRun,
) -> None:
    run, said = fit_then_test.run, fit_then_test.said
    best, last = Path(said["best_model_path"]), Path(said["last_model_path"])
    assert run.sequence() == [
        "train_loss",
        "train_loss",
        "val_loss",
        "train_loss",
        "train_loss",
        "val_loss",
        f"artifact:{best.name}",
        "artifact:last.ckpt",
        "test_acc",
    ]
    val_losses = [row["val_loss"] for row in run.rows if "val_loss" in row]
    settings = {
        "monitor": "val_loss",
        "mode": "min",
        "save_last": True,
        "save_top_k": 1,
        "save_weights_only": False,
        "_every_n_train_steps": 0,
    }
    uploaded_best, uploaded_last = run.artifacts("model")
    for artifact, path, aliases, score in (
        (uploaded_best, best, {"latest", "best"}, min(val_losses)),
        (uploaded_last, last, {"latest"}, val_losses[-1]),
    ):
        assert artifact.name == f"model-{said['version']}"
        assert set(artifact.aliases) == aliases
        metadata = json.loads(artifact.metadata)
        assert metadata == {"score": pytest.approx(score), "original_filename": path.name, "ModelCheckpoint": settings}
        (entry,) = artifact.manifest.contents
        assert entry.path == "model.ckpt"
        assert entry.digest == md5_base64(path)
        # the default add_file_policy ("mutable") uploads a copy, staged in W&B's data folder
        assert Path(entry.local_path).is_relative_to(Path(said["save_dir"]) / "wandb-data")
        assert md5_base64(entry.local_path) == entry.digest


def test_each_trainer_call_stores_its_state_history_and_diagram_in_the_run(fit_then_test: ScriptRun) -> None:
    run, said = fit_then_test.run, fit_then_test.said
    fit_flow, test_flow = run.artifacts("state-flow")
    # each dump ends with the transition the call ends with, sent while it is being taken
    ends = (("epoch_boundary", "fitting.between_epochs"), ("finish", "testing"))
    for number, (artifact, end) in enumerate(zip((fit_flow, test_flow), ends, strict=True)):
        assert artifact.name == f"state-flow-{said['version']}"
        folder = run.files / "state-flow" / str(number)
        entries = manifest(artifact)
        # every file the trainer sent, the diagram as SVG or, without Graphviz, as DOT
        assert set(entries) == {path.name for path in folder.iterdir()}
        assert {"state-history.json", "state-timeline.trace.json"} <= set(entries)
        assert len(set(entries) & {"state-overlay.svg", "state-overlay.dot"}) == 1
        for name, entry in entries.items():
            assert Path(entry.local_path) == folder / name  # kept in the run's own folder
            assert entry.digest == md5_base64(folder / name)
        records = json.loads((folder / "state-history.json").read_text())["records"]
        assert records[0]["trigger"] == "fit"
        assert (records[-1]["trigger"], records[-1]["source"]) == end
        assert ("test" in [record["trigger"] for record in records]) == (number == 1)


def test_a_script_that_raises_in_training_step_ends_its_run_with_exit_code_1(failing_fit: ScriptRun) -> None:
    run = failing_fit.run
    assert run.exit_code == 1
    assert_rows(run.rows, LIGHTNING_FIT_ROWS[:1])
    assert run.config == {**SCRIPT_HPARAMS, "fail_at_step": 3}


def test_a_failed_fit_uploads_no_checkpoint_but_its_flow_up_to_the_failure(failing_fit: ScriptRun) -> None:
    run = failing_fit.run
    assert run.artifacts("model") == []
    (flow,) = run.artifacts("state-flow")
    assert set(manifest(flow)) >= {"state-history.json"}
    history = json.loads((run.files / "state-flow" / "0" / "state-history.json").read_text())
    last = history["records"][-1]
    assert (last["trigger"], last["source"]) == ("interrupt", "fitting.training")
    assert last["exception"]["type"] == "Boom"
    assert last["global_step"] == 3


@pytest.mark.parametrize("log_model, save_top_k", [("all", 1), (True, -1)])
def test_checkpoints_are_uploaded_at_every_save_with_all_or_when_every_checkpoint_is_kept(
    offline: Path, log_model: Any, save_top_k: int
) -> None:
    torch.manual_seed(0)  # a model whose validation loss falls in the second epoch, so that it saves again
    logger = WandbLogger(log_model=log_model, add_file_policy="immutable")
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=save_top_k, save_last=True)
    trainer = quiet_trainer(
        offline, logger=logger, max_epochs=2, log_every_n_steps=2, callbacks=[checkpoint], enable_checkpointing=True
    )
    trainer.fit(TinyModel(), make_loader(), make_loader())
    end_wandb()
    run = only_run(offline)
    assert run.sequence() == [
        "train_loss",
        "train_loss",
        "val_loss",
        "artifact:epoch=0-step=4.ckpt",
        "artifact:last.ckpt",
        "train_loss",
        "train_loss",
        "val_loss",
        "artifact:epoch=1-step=8.ckpt",
        "artifact:last.ckpt",
    ]
    uploads = run.artifacts("model")
    assert [set(artifact.aliases) for artifact in uploads] == [{"latest", "best"}, {"latest"}] * 2
    # "immutable" uploads the checkpoint file itself: no copy
    last_entry = manifest(uploads[-1])["model.ckpt"]
    assert Path(last_entry.local_path) == Path(checkpoint.last_model_path)
    assert last_entry.digest == md5_base64(checkpoint.last_model_path)


def test_a_spawned_fit_logs_rank_zeros_rows_to_the_run_of_the_launching_process(tmp_path: Path) -> None:
    """Under ddp_spawn the logger travels pickled: the launching process starts the run, rank 0 attaches to it,
    rank 1 logs nothing, and the run ends when the script does."""
    done = script_run(tmp_path, "--spawn")
    assert done.process.returncode == 0, done.process.stderr[-3000:]
    run = done.run
    assert run.run.run_id == done.said["version"]
    # 4 batches a epoch shared by 2 ranks: 2 steps an epoch; metrics every 2 steps
    assert_rows(
        run.rows,
        [
            {"_step": 0, "trainer/global_step": 1, "epoch": 0, "train_loss": float},
            {"_step": 1, "trainer/global_step": 1, "epoch": 0, "val_loss": float},
            {"_step": 2, "trainer/global_step": 3, "epoch": 1, "train_loss": float},
            {"_step": 3, "trainer/global_step": 3, "epoch": 1, "val_loss": float},
        ],
    )
    assert run.config == SCRIPT_HPARAMS
    assert run.exit_code == 0


# ---- the logger's own methods -----------------------------------------------------------------------------------


def test_metrics_get_the_prefix_and_the_trainer_step(offline: Path) -> None:
    logger = WandbLogger(prefix="train")
    logger.log_metrics({"loss": 0.5}, step=4)
    logger.log_metrics({"loss": 0.25})  # no step: W&B keeps the last trainer step
    end_wandb()
    assert only_run(offline).rows == [
        {"_step": 0, "train-loss": 0.5, "trainer/global_step": 4},
        {"_step": 1, "train-loss": 0.25, "trainer/global_step": 4},
    ]


def act() -> str:
    return "relu"


def test_hyperparameters_become_config_values_json_can_hold(offline: Path) -> None:
    logger = WandbLogger()
    logger.log_hyperparams(
        {
            "layer": torch.nn.Linear,  # a class: its name
            "activation": act,  # called without arguments: what it returns
            "loss": torch.nn.functional.cross_entropy,  # needs arguments: its name
            "scale": torch.tensor(0.5),  # JSON cannot hold it: its str
            "nested": {"depth": 2, "widths": [4, 8]},
        }
    )
    logger.log_hyperparams(argparse.Namespace(lr=0.01, layer="conv"))  # later values replace earlier ones
    end_wandb()
    assert only_run(offline).config == {
        "layer": "conv",
        "activation": "relu",
        "loss": "cross_entropy",
        "scale": "tensor(0.5000)",
        "nested": {"depth": 2, "widths": [4, 8]},
        "lr": 0.01,
    }


def test_tables_text_images_and_videos_are_logged_as_w_and_b_media(offline: Path) -> None:
    logger = WandbLogger()
    logger.log_table("scores", columns=["name", "score"], data=[["a", 1], ["b", 2]], step=3)
    logger.log_text("notes", columns=["text"], data=[["hello"]], step=4)
    images = [np.zeros((4, 4, 3), dtype=np.uint8), np.full((4, 4, 3), 255, dtype=np.uint8)]
    logger.log_image("pictures", images, step=5, caption=["black", "white"])
    Image.new("RGB", (8, 8), "red").save(offline / "clip.gif")
    logger.log_video("clips", [str(offline / "clip.gif")], step=6, caption=["red"])
    files = Path(logger.experiment.dir)
    end_wandb()
    scores, notes, pictures, clips = only_run(offline).rows
    assert (scores["scores"]["_type"], scores["trainer/global_step"]) == ("table-file", 3)
    assert json.loads((files / scores["scores"]["path"]).read_text())["data"] == [["a", 1], ["b", 2]]
    assert json.loads((files / notes["notes"]["path"]).read_text())["columns"] == ["text"]
    assert pictures["pictures"]["_type"] == "images/separated"
    assert pictures["pictures"]["captions"] == ["black", "white"]
    assert all((files / name).is_file() for name in pictures["pictures"]["filenames"])
    assert clips["clips"]["captions"] == ["red"] and clips["trainer/global_step"] == 6
    assert (files / clips["clips"]["videos"][0]["path"]).is_file()


def test_audio_goes_to_wandb_audio(offline: Path) -> None:
    with wave.open(str(offline / "beep.wav"), "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(8000)
        clip.writeframes(b"\0\0" * 800)
    logger = WandbLogger()
    try:
        import soundfile  # noqa: F401
    except ImportError:
        # wandb.Audio needs the soundfile package to log any clip, and says so
        with pytest.raises(wandb.Error, match="soundfile"):
            logger.log_audio("sounds", [str(offline / "beep.wav")], caption=["beep"])
        return
    logger.log_audio("sounds", [str(offline / "beep.wav")], caption=["beep"], step=2)
    end_wandb()
    (row,) = only_run(offline).rows
    assert row["sounds"]["captions"] == ["beep"] and row["trainer/global_step"] == 2


@pytest.mark.parametrize(
    "method, argument", [("log_image", "images"), ("log_audio", "audios"), ("log_video", "videos")]
)
def test_media_must_come_as_lists_with_one_option_value_per_item(offline: Path, method: str, argument: str) -> None:
    logger = WandbLogger()
    log = getattr(logger, method)
    with pytest.raises(TypeError, match=f"Expected a list as \"{argument}\", found <class 'str'>"):
        log("media", "one.png")
    with pytest.raises(ValueError, match="Expected 2 items but only found 1 for caption"):
        log("media", ["one.png", "two.png"], caption=["only one"])
    assert not (offline / "wandb").exists()  # refused before a run was started


def test_watch_logs_gradients_parameters_and_the_graph(offline: Path) -> None:
    logger = WandbLogger()
    model = TinyModel()
    logger.watch(model, log="all", log_freq=1)
    quiet_trainer(offline, logger=logger, log_every_n_steps=1).fit(model, make_loader(n=16))
    files = Path(logger.experiment.dir)
    end_wandb()
    rows = only_run(offline).rows
    assert [row["trainer/global_step"] for row in rows] == [0, 1]
    for row in rows:
        for name in ("gradients", "parameters"):
            assert row[f"{name}/layer.weight"]["_type"] == "histogram"
            assert row[f"{name}/layer.bias"]["_type"] == "histogram"
    assert list((files / "media" / "graph").glob("*.graph.json"))


def test_flow_files_without_a_run_start_none(offline: Path) -> None:
    logger = WandbLogger()
    logger.log_flow_artifacts({"state-history.json": b"{}"})
    logger.finalize("failed")
    assert not (offline / "wandb").exists()


def test_a_disabled_run_keeps_no_flow_files(offline: Path) -> None:
    logger = WandbLogger(mode="disabled")
    run_folder = Path(logger.experiment.dir)
    logger.log_flow_artifacts({"state-history.json": b"{}"})
    assert not (run_folder / "state-flow").exists()
    assert not (offline / "wandb").exists()


def test_other_ranks_get_an_experiment_that_does_nothing(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = WandbLogger(version="shared1")
    assert isinstance(logger.experiment, NoExperiment)
    logger.experiment.log({"ignored": 1.0})
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_table("t", columns=["a"], data=[[1]])
    logger.watch(TinyModel())
    logger.log_flow_artifacts({"state-history.json": b"{}"})
    logger.finalize("success")
    assert logger.version == "shared1"
    assert not (offline / "wandb").exists()


def test_rank_zero_attaches_to_the_run_a_pickled_logger_carries(offline: Path) -> None:
    """What ddp_spawn does with the logger, in two steps: pickling starts the run here; another process
    unpickles the logger and logs to that same run."""
    logger = WandbLogger(name="shared")
    payload = pickle.dumps(logger)
    run_id = logger.version
    child = (
        "import pickle, sys; logger = pickle.loads(sys.stdin.buffer.read()); "
        "logger.log_metrics({'from_child': 1.0}, step=7); print(logger.version)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", child], input=payload, env=env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().strip() == run_id
    end_wandb()
    run = only_run(offline)
    assert run.run.run_id == run_id and run.run.display_name == "shared"
    assert run.rows == [{"_step": 0, "from_child": 1.0, "trainer/global_step": 7}]


# ---- where the run goes, and what it is called ------------------------------------------------------------------


def test_name_and_id_are_the_runs_project_defaults_to_lightning_logs(offline: Path) -> None:
    logger = WandbLogger(name="my-run", id="run12345")
    assert (logger.name, logger.version, logger.save_dir) == ("lightning_logs", "run12345", ".")
    logger.log_metrics({"x": 1.0}, step=0)
    end_wandb()
    # the default save_dir "." puts the run under the working directory, whatever WANDB_DIR says
    (run,) = offline_runs(offline)
    assert (run.run.run_id, run.run.display_name, run.run.project) == ("run12345", "my-run", "lightning_logs")


def test_wandb_project_names_the_project_and_wandb_dir_holds_the_run_without_a_save_dir(
    offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    monkeypatch.setenv("WANDB_DIR", str(offline / "elsewhere"))
    (offline / "elsewhere").mkdir()
    logger = WandbLogger(save_dir=None, version="v1")
    assert (logger.name, logger.save_dir) == ("from-env", None)
    assert logger.experiment.id == "v1"
    end_wandb()
    (run,) = offline_runs(offline / "elsewhere")
    assert (run.run.project, run.run.run_id) == ("from-env", "v1")


def test_dir_is_another_name_for_save_dir(offline: Path) -> None:
    logger = WandbLogger(dir=offline / "runs")
    assert logger.save_dir == str(offline / "runs")
    assert logger.experiment.dir.startswith(str(offline / "runs"))
    end_wandb()
    assert len(offline_runs(offline / "runs")) == 1


def test_offline_true_keeps_the_run_local_whatever_wandb_mode_says(
    offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    logger = WandbLogger(offline=True)
    logger.log_metrics({"x": 1.0}, step=3)
    end_wandb()
    assert only_run(offline).rows == [{"_step": 0, "x": 1.0, "trainer/global_step": 3}]


def test_a_run_already_in_progress_is_reused_with_a_warning(offline: Path) -> None:
    active = wandb.init(project="mine")
    logger = WandbLogger()
    with pytest.warns(TrainerWarning, match="There is a wandb run already in progress"):
        assert logger.experiment is active
    assert logger.version == active.id


def test_a_given_experiment_is_the_run_logged_to(offline: Path) -> None:
    given = wandb.init(project="given", id="given123")
    logger = WandbLogger(experiment=given)
    logger.log_metrics({"x": 2.0}, step=1)
    assert logger.version == "given123" and logger.experiment is given
    end_wandb()
    assert only_run(offline).rows == [{"_step": 0, "x": 2.0, "trainer/global_step": 1}]


# ---- refusals ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"name": 3}, ValueError, "name 3 must be a str or None"),
        ({"project": ["p"]}, ValueError, r"project \['p'\] must be a str or None"),
        ({"version": 7}, ValueError, "version 7 must be a str or None"),
        ({"id": 7}, ValueError, "id 7 must be a str or None"),
        ({"version": "a", "id": "b"}, ValueError, "version 'a' and id 'b' name two runs"),
        ({"save_dir": 5}, ValueError, "save_dir 5 must be a str, an os.PathLike or None"),
        ({"save_dir": "s3://bucket/runs"}, ValueError, "is a URL"),
        ({"save_dir": "a", "dir": "b"}, ValueError, "save_dir 'a' and dir 'b' name two folders"),
        ({"offline": "yes"}, ValueError, "offline 'yes' must be a bool"),
        ({"anonymous": 1}, ValueError, "anonymous 1 must be a bool or None"),
        ({"log_model": "best"}, ValueError, "log_model 'best' must be True, False or 'all'"),
        ({"log_model": 1}, ValueError, "log_model 1 must be True, False or 'all'"),
        ({"prefix": None}, ValueError, "prefix None must be a str"),
        ({"checkpoint_name": 1}, ValueError, "checkpoint_name 1 must be a str or None"),
        ({"add_file_policy": "copy"}, ValueError, "add_file_policy 'copy' must be one of 'mutable', 'immutable'"),
        ({"experiment": "run"}, ValueError, "experiment 'run' must be a wandb run"),
        (
            {"offline": True, "log_model": True},
            MisconfigurationException,
            "Providing log_model=True and offline=True is an invalid configuration",
        ),
        ({"offline": True, "mode": "online"}, ValueError, "offline=True and mode='online' contradict each other"),
        ({"entity_name": "me"}, TypeError, "keyword arguments wandb.init does not take: entity_name"),
        ({"sync_tensorboard": True}, ValueError, r"WandbLogger\(sync_tensorboard=True\) is not supported"),
    ],
)
def test_bad_arguments_are_refused_before_a_run_starts(
    offline: Path, kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        WandbLogger(**kwargs)
    assert not (offline / "wandb").exists()


def test_finalize_refuses_an_unknown_status(offline: Path) -> None:
    with pytest.raises(ValueError, match="finalize status 'done' is not one of"):
        WandbLogger().finalize("done")


def test_without_wandb_installed_the_error_says_how_to_install_it() -> None:
    script = (
        "import sys; sys.modules['wandb'] = None\n"
        "from statemachine.loggers import WandbLogger\n"
        "try:\n"
        "    WandbLogger()\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WandbLogger requires `wandb`" in done.stdout
    assert 'pip install "statemachine-trainer[wandb]"' in done.stdout
