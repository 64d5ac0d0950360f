"""Sharded training on CPU with gloo: FSDPStrategy and ModelParallelStrategy on FSDP2, two real processes per run
(the trainer starts tests/scripts/sharded_app.py again for rank 1), and their checkpoints across world sizes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import statemachine as L
from devices import checkpoint_io, sharded
from stages.exceptions import TrainerWarning
from statemachine.plugins import MixedPrecision
from statemachine.strategies import FSDPStrategy, ModelParallelStrategy

APP = Path(__file__).parent / "scripts" / "sharded_app.py"
HARD_TIMEOUT = 180  # seconds; a hang fails the test instead of the suite
sys.path.insert(0, str(APP.parent))  # the app's model and data, imported from the script the ranks run
from sharded_app import ShardedModel, data  # noqa: E402


def _fit(out: Path, check: bool = True, **config: Any) -> subprocess.CompletedProcess[str]:
    config.setdefault("strategy", "fsdp")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PL_GLOBAL_SEED", None)
    result = subprocess.run(
        [sys.executable, str(APP), str(out), json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=HARD_TIMEOUT,
    )
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def _ranks(out: Path, count: int = 2) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(count)]


def _weights(out: Path, moment: str = "end") -> dict[str, torch.Tensor]:
    return torch.load(out / "weights.pt")[moment]


def _assert_same_weights(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    assert sorted(first) == sorted(second)
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=1e-5, atol=1e-7, msg=name)


TOTAL_ELEMENTS = sum(p.numel() for p in ShardedModel().parameters())


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    _fit(out, strategy="ddp")
    return out


def test_fsdp_fit_gives_ddps_weights_while_each_rank_holds_half_the_parameters(ddp_run: Path, tmp_path: Path) -> None:
    _fit(tmp_path)
    _assert_same_weights(_weights(tmp_path), _weights(ddp_run))
    ranks = _ranks(tmp_path)
    assert [r["global_step"] for r in ranks] == [8, 8]  # 2 epochs of 4 batches per rank
    assert sum(r["local_elements"] for r in ranks) == TOTAL_ELEMENTS
    assert all(abs(r["local_elements"] - TOTAL_ELEMENTS / 2) <= 16 for r in ranks)  # dim-0 shards, rows rounded
    assert [r["local_elements"] for r in _ranks(ddp_run)] == [TOTAL_ELEMENTS, TOTAL_ELEMENTS]


@pytest.mark.parametrize(
    ("sharding", "replicated"),
    [("SHARD_GRAD_OP", False), ("NO_SHARD", True), ("HYBRID_SHARD", False)],
)
def test_every_sharding_strategy_trains_like_ddp(
    ddp_run: Path, tmp_path: Path, sharding: str, replicated: bool
) -> None:
    mesh = {"device_mesh": [1, 2]} if sharding == "HYBRID_SHARD" else {}
    _fit(tmp_path, sharding_strategy=sharding, **mesh)
    _assert_same_weights(_weights(tmp_path), _weights(ddp_run))
    held = [r["local_elements"] for r in _ranks(tmp_path)]
    assert held == [TOTAL_ELEMENTS] * 2 if replicated else sum(held) == TOTAL_ELEMENTS


def test_activation_checkpointing_recomputes_the_blocks_in_backward(ddp_run: Path, tmp_path: Path) -> None:
    _fit(tmp_path, checkpointing=True)
    _assert_same_weights(_weights(tmp_path), _weights(ddp_run))
    # Each of the 8 training steps of a rank runs each block once more, in backward.
    plain, checkpointed = _ranks(ddp_run)[0]["block_calls"], _ranks(tmp_path)[0]["block_calls"]
    assert [b - a for a, b in zip(plain, checkpointed)] == [8, 8]


def test_gradient_clipping_by_norm_over_shards_matches_ddp(tmp_path: Path) -> None:
    _fit(tmp_path / "ddp", strategy="ddp", clip=0.01)
    _fit(tmp_path / "fsdp", clip=0.01)  # the norm is of the whole gradient, not of each rank's shard
    _assert_same_weights(_weights(tmp_path / "fsdp"), _weights(tmp_path / "ddp"))


def test_bf16_mixed_computes_in_bfloat16_on_float32_shards(tmp_path: Path) -> None:
    _fit(tmp_path, precision="bf16-mixed", epochs=1)
    for record in _ranks(tmp_path):
        assert record["gathered_dtype"] == "torch.bfloat16"  # the policy's compute copies
        assert record["compute_dtype"] == "torch.bfloat16"
        assert record["parameter_dtype"] == "torch.float32"  # the shards the optimizer steps
    assert all(torch.isfinite(w).all() for w in _weights(tmp_path).values())


def test_an_fsdp_precision_plugin_trains_as_the_precision_flag_does(tmp_path: Path) -> None:
    _fit(tmp_path / "flag", precision="bf16-mixed", epochs=1)
    _fit(tmp_path / "plugin", fsdp_precision="bf16-mixed", epochs=1)
    for record in _ranks(tmp_path / "plugin"):
        assert record["gathered_dtype"] == record["compute_dtype"] == "torch.bfloat16"
        assert record["parameter_dtype"] == "torch.float32"
    _assert_same_weights(_weights(tmp_path / "plugin"), _weights(tmp_path / "flag"))


def test_model_parallel_shards_in_configure_model_through_the_device_mesh(ddp_run: Path, tmp_path: Path) -> None:
    _fit(tmp_path, strategy="model_parallel", state_dict_type="sharded", sizes=[2, 1], save_top_k=1)
    _assert_same_weights(_weights(tmp_path), _weights(ddp_run))
    ranks = _ranks(tmp_path)
    assert all(r["mesh"] == ["data_parallel", "tensor_parallel"] for r in ranks)
    assert sum(r["local_elements"] for r in ranks) == TOTAL_ELEMENTS
    # save_top_k=1 removed the first epoch's folder once the second was written
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["epoch=1-step=8.ckpt", "last.ckpt"]
    folder = tmp_path / "checkpoints" / "last.ckpt"
    assert sorted(os.listdir(folder)) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    meta = torch.load(folder / "meta.pt", weights_only=False)
    assert meta["global_step"] == 8 and "state_dict" not in meta and "optimizer_states" not in meta


def test_a_sharded_checkpoint_resumes_exactly_on_two_ranks_and_continues_on_one(ddp_run: Path, tmp_path: Path) -> None:
    first = tmp_path / "first"
    _fit(first, state_dict_type="sharded", epochs=1)
    saved = first / "checkpoints" / "epoch=0-step=4.ckpt"
    assert sorted(os.listdir(saved)) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    saved_weights = sharded.consolidate(saved)["state_dict"]

    again = tmp_path / "two"
    _fit(again, state_dict_type="sharded", ckpt=str(saved))
    _assert_same_weights(_weights(again, "start"), saved_weights)
    _assert_same_weights(_weights(again), _weights(ddp_run))  # as if never interrupted (optimizer state too)
    assert [r["start"] for r in _ranks(again)] == [[1, 4], [1, 4]]

    one = tmp_path / "one"
    _fit(one, state_dict_type="sharded", devices=1, ckpt=str(saved))
    _assert_same_weights(_weights(one, "start"), saved_weights)
    record = _ranks(one, 1)[0]
    assert record["start"] == [1, 4] and record["global_step"] == 4 + 8  # one rank reads all 8 batches
    assert record["local_elements"] == TOTAL_ELEMENTS


def test_a_checkpoint_of_one_rank_resumes_on_two_with_the_state_resharded(tmp_path: Path) -> None:
    first = tmp_path / "first"
    _fit(first, state_dict_type="sharded", devices=1, epochs=1)
    saved = first / "checkpoints" / "epoch=0-step=8.ckpt"
    assert sorted(os.listdir(saved)) == [".metadata", "__0_0.distcp", "meta.pt"]
    again = tmp_path / "two"
    _fit(again, state_dict_type="sharded", ckpt=str(saved))
    _assert_same_weights(_weights(again, "start"), sharded.consolidate(saved)["state_dict"])
    ranks = _ranks(again)
    assert [r["start"] for r in ranks] == [[1, 8], [1, 8]] and [r["global_step"] for r in ranks] == [12, 12]
    assert sum(r["local_elements"] for r in ranks) == TOTAL_ELEMENTS


def test_a_full_checkpoint_is_one_file_that_loads_and_resumes_without_a_strategy(ddp_run: Path, tmp_path: Path) -> None:
    _fit(tmp_path, state_dict_type="full")
    path = tmp_path / "checkpoints" / "last.ckpt"
    assert path.is_file()
    checkpoint = torch.load(path, weights_only=False)
    _assert_same_weights(checkpoint["state_dict"], _weights(ddp_run))
    model = ShardedModel.load_from_checkpoint(path)
    _assert_same_weights(model.state_dict(), _weights(ddp_run))
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    with pytest.warns(TrainerWarning, match="holds state for callbacks that are not in this run"):
        trainer.fit(ShardedModel(), data(), ckpt_path=str(path))
    assert trainer.global_step == 8 + 8  # the optimizer state, saved by parameter name, loaded by position


def test_empty_init_builds_on_the_meta_device_and_each_rank_materialises_its_shard(tmp_path: Path) -> None:
    first = tmp_path / "first"
    _fit(first, state_dict_type="full", epochs=1)
    saved = first / "checkpoints" / "last.ckpt"
    again = tmp_path / "again"
    _fit(again, empty_init=True, ckpt=str(saved))
    ranks = _ranks(again)
    assert all(r["born_on_meta"] for r in ranks)
    assert sum(r["local_elements"] for r in ranks) == TOTAL_ELEMENTS  # each rank made only its shard real
    _assert_same_weights(_weights(again, "start"), torch.load(saved, weights_only=False)["state_dict"])
    assert [r["start"] for r in ranks] == [[1, 4], [1, 4]]


def test_the_converter_writes_one_file_from_a_sharded_folder(tmp_path: Path) -> None:
    _fit(tmp_path, state_dict_type="sharded", epochs=1)
    folder = tmp_path / "checkpoints" / "last.ckpt"
    command = [sys.executable, "-m", "statemachine.utilities.consolidate_checkpoint"]
    result = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=HARD_TIMEOUT)
    assert result.returncode == 0, result.stderr
    consolidated = torch.load(f"{folder}.consolidated", weights_only=False)
    assert consolidated["global_step"] == 4 and consolidated["epoch"] == 0
    _assert_same_weights(consolidated["state_dict"], _weights(tmp_path))
    assert sorted(consolidated["optimizer_states"][0]["state"]) == sorted(consolidated["state_dict"])
    model = ShardedModel.load_from_checkpoint(f"{folder}.consolidated")
    _assert_same_weights(model.state_dict(), _weights(tmp_path))

    again = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=HARD_TIMEOUT)
    assert again.returncode == 1 and "already exists" in again.stderr
    missing = subprocess.run([*command, str(tmp_path / "nope")], capture_output=True, text=True, timeout=HARD_TIMEOUT)
    assert missing.returncode == 1 and "The provided checkpoint folder does not exist" in missing.stderr
    plain = subprocess.run([*command, str(tmp_path)], capture_output=True, text=True, timeout=HARD_TIMEOUT)
    assert plain.returncode == 1 and "Only FSDP-sharded checkpoints saved with Lightning" in plain.stderr


def test_a_rank_killed_inside_a_sharded_save_leaves_the_previous_checkpoint_and_no_partial_folder(
    tmp_path: Path,
) -> None:
    # Saves: epoch 0 (the first write of rank 1's shards), then last; rank 1 dies inside the third write (epoch 1).
    result = _fit(tmp_path, check=False, state_dict_type="sharded", kill_in_save=3)
    assert result.returncode != 0
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    visible = [name for name in names if not name.startswith(".")]
    assert visible == ["epoch=0-step=4.ckpt", "last.ckpt"]
    for name in visible:
        checkpoint = sharded.consolidate(tmp_path / "checkpoints" / name)
        assert checkpoint["global_step"] == 4
    # The folder the killed save was writing stays hidden, and the next run clears it before its first save.
    hidden = [name for name in names if name.startswith(".")]
    assert hidden and all(checkpoint_io.TEMPORARY_NAME.fullmatch(name) for name in hidden)
    _fit(tmp_path, state_dict_type="sharded", ckpt=str(tmp_path / "checkpoints" / "last.ckpt"))
    assert not [name for name in os.listdir(tmp_path / "checkpoints") if name.startswith(".")]


# ---- bad input: refused when the Trainer is built, naming the value and what is allowed ---------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sharding_strategy": "ZERO3"}, "FSDPStrategy(sharding_strategy='ZERO3') is not valid; use one of"),
        ({"state_dict_type": "local"}, "state_dict_type='local') is not valid; use 'full' or 'sharded'"),
        ({"device_mesh": (1, 2)}, "needs sharding_strategy='HYBRID_SHARD'"),
        ({"limit_all_gathers": True}, "FSDPStrategy(limit_all_gathers=...) is not supported: FSDP2 has no such"),
        ({"auto_wrap_policy": {int}}, "must be a non-empty set of nn.Module classes"),
        ({"cpu_offload": "yes"}, "cpu_offload='yes') is not valid"),
    ],
)
def test_fsdp_arguments_fsdp2_cannot_honour_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        FSDPStrategy(**options)


def test_fsdp_refuses_cpu_offload_on_the_cpu_and_a_gradient_scaler() -> None:
    with pytest.raises(ValueError, match="cpu_offload needs accelerator='cuda'"):
        L.Trainer(accelerator="cpu", devices=2, strategy="fsdp_cpu_offload", logger=False)
    scaled = MixedPrecision("16-mixed", "cpu")
    with pytest.raises(ValueError, match="precision='16-mixed' is not supported: its gradient scaler"):
        L.Trainer(accelerator="cpu", devices=2, strategy="fsdp", plugins=[scaled], logger=False)


def test_model_parallel_sizes_must_multiply_to_the_world_size() -> None:
    strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2)
    with pytest.raises(RuntimeError, match=r"multiplied should equal the world size \(2\)"):
        L.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False)
    with pytest.raises(ValueError, match=re.escape("ModelParallelStrategy(data_parallel_size=0) is not valid")):
        ModelParallelStrategy(data_parallel_size=0)


def test_model_parallel_without_configure_model_says_to_override_it(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import statemachine as L\n"
        "from sharded_app import ShardedModel, data\n"
        "from statemachine.strategies import ModelParallelStrategy\n"
        "trainer = L.Trainer(accelerator='cpu', devices=2, strategy=ModelParallelStrategy(), max_epochs=1,\n"
        "                    logger=False, enable_checkpointing=False, enable_progress_bar=False)\n"
        "trainer.fit(ShardedModel(parallelize=False), data())\n"
    )
    result = subprocess.run(
        [sys.executable, str(script), str(APP.parent)],
        capture_output=True,
        text=True,
        timeout=HARD_TIMEOUT,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "you are required to override the `configure_model()` hook" in result.stderr


# ---- the README's examples run as written -------------------------------------------------------------------------


def _readme_big_models_programs() -> list[str]:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Big models", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize(
    ("index", "checkpoint"),
    [(0, "epoch=1-step=64.ckpt"), (1, "epoch=1-step=128.ckpt")],  # FSDP splits the data; tensor parallel does not
    ids=["FSDPStrategy", "ModelParallelStrategy"],
)
def test_the_readme_big_models_programs_run_as_written(tmp_path: Path, index: int, checkpoint: str) -> None:
    programs = _readme_big_models_programs()
    assert len(programs) == 2
    script = tmp_path / "big.py"
    script.write_text(programs[index])
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=HARD_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-4000:]
    saved = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / checkpoint
    assert sharded.is_sharded_checkpoint(saved)  # both write folders of shards
