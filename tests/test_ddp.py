"""Multi-process runs on CPU with gloo: two real processes per test, launched the ways users launch them.

Every subprocess gets a hard timeout; the failure tests also bound how long the whole run took to end.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from ddp_app import RankModel, dataset, loader, weights
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

import statemachine as L
from devices import environments
from devices.ddp import DDPStrategy
from devices.environments import find_free_port
from devices.launchers import MultiprocessingLauncher, RankFailedError
from devices.watchdog import PeerWatch, failure_store
from stages import samplers
from stages.combined_loader import CombinedLoader
from stages.exceptions import TrainerWarning
from statemachine.engine.history import load_history
from statemachine.engine.history import main as history_main
from statemachine.run import CHECK_RANKS_VARIABLE

APP = Path(__file__).with_name("ddp_app.py")
HARD_TIMEOUT = 120  # seconds; a hang fails the test instead of the suite
ENDS_WITHIN = 30  # seconds a failed run may take to end on every rank

# The hooks each rank records for fit (sanity check, 2 epochs), validate, test and predict, in Lightning's order.
EXPECTED_HOOKS = [
    "setup", "on_fit_start", "on_validation_start", "on_train_start",
    "on_train_epoch_start", "on_validation_start", "on_train_epoch_end",
    "on_train_epoch_start", "on_validation_start", "on_train_epoch_end",
    "on_train_end", "on_fit_end", "teardown",
    "setup", "on_validation_start", "teardown",
    "setup", "on_test_start", "teardown",
    "setup", "on_predict_start", "teardown",
]  # fmt: skip


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PL_GLOBAL_SEED", None)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=HARD_TIMEOUT)


def _ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def _trainer(root: Path, **options: Any) -> L.Trainer:
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "max_epochs": 2,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": root,
        "num_sanity_val_steps": 0,
    }
    return L.Trainer(**(settings | options))


def _assert_two_ranks_agree(out: Path) -> None:
    first, second = _ranks(out)
    assert [first["rank"], second["rank"]] == [0, 1] and first["world_size"] == second["world_size"] == 2
    assert first["weights"] == second["weights"]  # DDP keeps the replicas identical
    assert first["hooks"] == second["hooks"] == EXPECTED_HOOKS
    for record in (first, second):
        metrics = record["fit_metrics"]
        assert metrics["rank_mean"] == 0.5  # synced mean of 0 and 1
        assert metrics["rank_local"] == record["rank"]  # not synced: each rank keeps its own
        assert metrics["rank_max"] == 1.0 and metrics["gathered_sum"] == 1.0
        assert metrics["val_rank_sum"] == 4.0  # rank 1 logs 1.0 in each of its 4 batches, summed over ranks
        assert record["tested"] == [{"test_rank": 0.5}]
        assert record["validated"] == first["validated"]
    assert first["fit_metrics"]["only_zero"] == 10.0 and "only_zero" not in second["fit_metrics"]
    # predict: every sample exactly once over the two ranks, even with an odd count
    assert sorted(first["predicted"] + second["predicted"]) == list(range(31))
    assert first["predictions"] == first["predicted"]


def test_script_relaunch_runs_every_entry_point_on_two_ranks(tmp_path: Path) -> None:
    result = _run([sys.executable, str(APP), str(tmp_path), "--strategy", "ddp", "--test-alone"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_two_ranks_agree(tmp_path)
    first, second = _ranks(tmp_path)
    # Only global rank 0 writes logs, in the one version folder both ranks agree on; the checkpoint is shared.
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]
    assert first["log_dir"] == second["log_dir"] and (Path(first["log_dir"]) / "metrics.csv").is_file()
    assert first["best_model_path"] == second["best_model_path"] and Path(first["best_model_path"]).is_file()
    assert first["alone_world_size"] == 1 and first["tested_alone"] == [{"test_rank": 0.0}]


def test_torchrun_processes_join_instead_of_launching(tmp_path: Path) -> None:
    port = str(find_free_port())
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command = [*torchrun, "--master-addr", "127.0.0.1", "--master-port", port, str(APP), str(tmp_path)]
    result = _run(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_two_ranks_agree(tmp_path)


def test_spawn_gives_the_main_process_the_results_and_matches_one_process_with_twice_the_batch(
    tmp_path: Path,
) -> None:
    L.seed_everything(3)
    two_ranks = RankModel()
    one_process = copy.deepcopy(two_ranks)
    spawned = _trainer(tmp_path / "spawn", strategy="ddp_spawn", devices=2)
    spawned.fit(two_ranks, loader(4))
    _trainer(tmp_path / "single", devices=1).fit(one_process, loader(8))
    # Rank r reads samples r, r+2, ...: each step the two ranks' batches of 4 are the single process's batch of 8.
    # Not bit-exact: the all-reduce averages two means of 4 where one process takes one mean of 8, and float
    # addition is not associative; after 8 SGD steps the difference stays at rounding level.
    torch.testing.assert_close(weights(two_ranks), weights(one_process), rtol=0, atol=1e-6)
    assert weights(two_ranks) != weights(RankModel())
    assert spawned.state.finished
    assert [r.trigger for r in spawned.history][:2] == ["fit", "begin"] and spawned.history[-1].dest == "finished"
    assert {"train_loss", "rank_mean", "rank_local"} <= set(spawned.callback_metrics)
    assert float(spawned.callback_metrics["rank_mean"]) == 0.5
    assert float(spawned.callback_metrics["rank_local"]) == 0.0  # rank 0's own value
    best = Path(spawned.checkpoint_callback.best_model_path)
    assert best.is_file() and best.name == "epoch=1-step=8.ckpt"


def test_checkpoints_move_between_two_ranks_and_one_process(tmp_path: Path) -> None:
    model = RankModel()
    # One checkpoint folder for all three runs: a resume from another folder warns that top-k state is dropped.
    two = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=1)
    two.fit(model, loader(4))
    from_two = two.checkpoint_callback.best_model_path
    assert Path(from_two).name == "epoch=0-step=4.ckpt"  # 32 samples / 2 ranks / batch 4

    one = _trainer(tmp_path, devices=1, max_epochs=2)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        one.fit(RankModel(), loader(4), ckpt_path=from_two)
    assert (one.current_epoch, one.global_step) == (2, 12)  # resumed after 4 steps, then 8 single-process steps
    from_one = one.checkpoint_callback.best_model_path

    again = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=3)
    resumed = RankModel()
    with warnings.catch_warnings():
        # The forked ranks inherit this filter: the warning the single-process run asserted above is expected there.
        warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
        again.fit(resumed, loader(4), ckpt_path=from_one)
    final = torch.load(again.checkpoint_callback.best_model_path, weights_only=False)
    assert (final["epoch"], final["global_step"]) == (2, 16)
    assert weights(resumed) != weights(one.lightning_module)


class SeededRanks(RankModel):
    """Dropout that draws differently on each rank, so an exact resume needs every rank's generator states."""

    def on_train_start(self) -> None:
        torch.manual_seed(100 + self.global_rank)


def test_exact_mid_epoch_resume_with_two_ranks(tmp_path: Path) -> None:
    every_two = L.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1)
    uninterrupted = SeededRanks(dropout=0.5)
    start = copy.deepcopy(uninterrupted)
    shuffled = loader(4, shuffle=True)
    _trainer(tmp_path, strategy="ddp_fork", devices=2, callbacks=[every_two]).fit(uninterrupted, shuffled)
    mid_epoch = tmp_path / "ckpt" / "epoch=1-step=6.ckpt"  # batch 2 of the second epoch's 4
    assert mid_epoch.is_file()

    resumed = start
    with warnings.catch_warnings():
        # The forked ranks inherit this filter: the resume has no ModelCheckpoint, so its saved state is unused.
        warnings.filterwarnings("ignore", message=".* holds state for callbacks that are not in this run")
        _trainer(tmp_path / "resume", strategy="ddp_fork", devices=2).fit(resumed, shuffled, ckpt_path=mid_epoch)
    assert weights(resumed) == weights(uninterrupted)  # bit-exact


def _dumps(directory: Path) -> dict[int, Path]:
    found = {int(p.name.split("-")[2].removeprefix("rank")): p for p in directory.rglob("state-history-rank*.json")}
    return dict(sorted(found.items()))


def test_a_rank_raising_at_a_random_step_ends_every_rank(tmp_path: Path) -> None:
    step = random.randrange(1, 8)
    began = time.monotonic()
    command = [sys.executable, str(APP), str(tmp_path), "--strategy", "ddp", "--fail", f"1:{step}:raise"]
    result = _run(command, cwd=tmp_path)
    took = time.monotonic() - began
    assert result.returncode != 0
    assert took < ENDS_WITHIN, f"the run took {took:.1f}s to end after rank 1 failed at step {step}"
    # rank 0 reports which rank failed first and its original error
    assert f"rank 1 failed first: ValueError: injected failure at step {step}" in result.stderr
    dumps = _dumps(tmp_path)
    assert list(dumps) == [0, 1]
    for rank, path in dumps.items():
        history = load_history(path).records
        assert (history[-1].trigger, history[-1].rank) == ("interrupt", rank)


def test_a_sigkilled_rank_under_spawn_ends_the_run(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_spawn", devices=2)
    began = time.monotonic()
    with pytest.raises(RankFailedError, match="rank 1 failed first: the process was killed by SIGKILL") as info:
        trainer.fit(RankModel(fail=(1, 3, "kill")), loader(4))
    assert time.monotonic() - began < ENDS_WITHIN + 15  # plus starting two interpreters
    assert info.value.rank == 1
    assert list(_dumps(tmp_path)) == [0]  # the killed rank could not write one


def _killed_by_sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_launcher_records_a_killed_rank_where_every_ranks_watch_reads_it() -> None:
    """A rank killed by a signal cannot report itself: the launcher records its death in the key the other ranks'
    PeerWatch polls, so they stop naming the real cause instead of their own broken collective."""
    context = multiprocessing.get_context("fork")
    process = context.Process(target=_killed_by_sigkill)
    process.start()
    store = torch.distributed.HashStore()
    with pytest.raises(RankFailedError, match="rank 0 failed first: the process was killed by SIGKILL"):
        MultiprocessingLauncher(DDPStrategy())._collect([process], context.SimpleQueue(), failure_store(store))
    watch = PeerWatch(failure_store(store), rank=1)
    try:
        assert watch.read() == (0, "the process was killed by SIGKILL")
    finally:
        watch.stop()


@pytest.mark.parametrize("entry", ["fit", "validate"])
def test_a_batch_size_search_is_refused_in_a_multi_process_run(tmp_path: Path, entry: str) -> None:
    # at fit start (the finder's request) and on validate's entry edge alike: every edge into a search refuses it
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, callbacks=[L.BatchSizeFinder()])
    with pytest.raises(RankFailedError, match="BatchSizeFinder is not supported in multi-process runs"):
        getattr(trainer, entry)(RankModel(), loader(4))


# ---- samplers (no processes needed) -------------------------------------------------------------------------


def test_a_users_combined_loader_is_split_across_ranks_member_by_member() -> None:
    combined = CombinedLoader({"a": loader(4), "b": loader(2)}, mode="max_size_cycle")
    split = samplers.distribute(combined, "train", 2, 1)
    assert split is combined
    members = split.flattened
    assert all(isinstance(m.sampler, DistributedSampler) and m.sampler.rank == 1 for m in members)


def test_distributed_samplers_keep_shuffle_split_predict_without_repeats_and_leave_users_own() -> None:
    shuffled = samplers.distribute(DataLoader(dataset(), batch_size=4, shuffle=True), "train", 2, 1)
    assert isinstance(shuffled.sampler, DistributedSampler) and shuffled.sampler.shuffle
    assert (shuffled.sampler.num_replicas, shuffled.sampler.rank, shuffled.batch_size) == (2, 1, 4)
    ordered = samplers.distribute({"a": loader(4)}, "val", 2, 0)["a"]
    assert isinstance(ordered.sampler, DistributedSampler) and not ordered.sampler.shuffle
    shares = [list(samplers.distribute(loader(3, samples=5), "predict", 2, rank).sampler) for rank in (0, 1)]
    assert shares == [[0, 2, 4], [1, 3]]
    own = DataLoader(dataset(), sampler=DistributedSampler(dataset(), 4, 3, shuffle=False))
    assert samplers.distribute(own, "train", 2, 0) is own
    custom = DataLoader(dataset(), sampler=list(reversed(range(32))))
    split = [list(samplers.distribute(custom, "train", 2, rank).sampler) for rank in (0, 1)]
    assert split == [list(range(31, -1, -2)), list(range(30, -1, -2))]
    assert isinstance(loader(4).sampler, SequentialSampler) and isinstance(shuffled, DataLoader)
    assert not isinstance(shuffled.sampler, RandomSampler)


# ---- history diff across ranks ------------------------------------------------------------------------------


def test_history_diff_reports_the_first_transition_where_two_dumps_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = []
    for epochs in (1, 2):
        trainer = _trainer(tmp_path / str(epochs), max_epochs=epochs, enable_checkpointing=False)
        trainer.fit(RankModel(), loader(16))
        paths.append(trainer.dump_history(tmp_path / f"history-{epochs}.json"))
    assert history_main(["diff", paths[0], paths[0]]) == 0
    assert "same transitions" in capsys.readouterr().out
    assert history_main(["diff", *paths]) == 1
    report = capsys.readouterr().out
    # one epoch stops at the boundary after the first epoch; two epochs go on into the second there instead
    assert "first difference" in report
    stop = "epoch_boundary: fitting.between_epochs -> finished [fit_done]"
    assert f"'epoch_boundary' in fitting.between_epochs -> {stop} (epoch 1, step 2)" in report
    go_on = "epoch_boundary: fitting.between_epochs -> fitting.training [not fit_done]"
    assert f"'epoch_boundary' in fitting.between_epochs -> {go_on} (epoch 1, step 2)" in report


# ---- cluster environments (read from variables; nothing is launched) ------------------------------------------


def test_torchrun_variables_are_recognised_and_read() -> None:
    env = {"RANK": "3", "GROUP_RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}
    found = environments.detect(env)
    assert isinstance(found, environments.TorchElasticEnvironment) and found.creates_processes_externally
    assert (found.global_rank(), found.local_rank(), found.node_rank(), found.world_size()) == (3, 1, 1, 4)
    assert (found.main_address, found.main_port) == ("127.0.0.1", 29400)
    assert found.processes_per_node() == 2  # what devices="auto" means under torchrun


@pytest.mark.parametrize(("per_node", "expected"), [("4", 4), ("4(x2)", 4), ("2,1", None), (None, None)])
def test_slurm_says_its_tasks_per_node_when_they_are_the_same_on_every_node(
    per_node: str | None, expected: int | None
) -> None:
    env = {"SLURM_NTASKS": "8", "SLURM_JOB_NAME": "train"} | ({"SLURM_NTASKS_PER_NODE": per_node} if per_node else {})
    assert environments.SLURMEnvironment(env=env).processes_per_node() == expected


def test_slurm_variables_give_ranks_the_first_node_and_a_port_from_the_job_id() -> None:
    env = {
        "SLURM_NTASKS": "8",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2",
        "SLURM_JOB_ID": "1234567",
        "SLURM_NODELIST": "gpu[003-005,010],cpu1",
        "SLURM_JOB_NAME": "train",
    }
    found = environments.detect(env)
    assert isinstance(found, environments.SLURMEnvironment) and found.creates_processes_externally
    assert (found.global_rank(), found.local_rank(), found.node_rank(), found.world_size()) == (5, 1, 2, 8)
    assert found.main_address == "gpu003"
    assert found.main_port == 15000 + 4567  # every task derives the same port without talking
    # an interactive allocation (salloc, then python) is a plain local run
    assert isinstance(environments.detect(env | {"SLURM_JOB_NAME": "bash"}), environments.LightningEnvironment)
    assert environments.first_hostname("node7") == "node7"


def test_a_plain_run_is_local_and_a_relaunched_child_joins() -> None:
    plain = environments.detect({})
    assert isinstance(plain, environments.LightningEnvironment) and not plain.creates_processes_externally
    assert plain.main_address == "127.0.0.1"
    child = environments.detect({environments.LAUNCHED_MARKER: "1", "LOCAL_RANK": "1", "RANK": "1"})
    assert child.creates_processes_externally and (child.local_rank(), child.global_rank()) == (1, 1)
    with pytest.raises(ValueError, match="LOCAL_RANK='x' must be an integer"):
        environments.LightningEnvironment({"LOCAL_RANK": "x"}).local_rank()


def test_a_strategy_refuses_a_world_the_launcher_did_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WORLD_SIZE", "3")
    strategy = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False).strategy
    assert strategy.launcher is None  # torchrun started the processes
    with pytest.raises(ValueError, match="started 3 processes, but the Trainer asks for devices=2"):
        strategy.setup_environment()


def test_one_process_collectives_are_identities() -> None:
    strategy = L.Trainer(accelerator="cpu", devices=1, logger=False).strategy
    assert strategy.reduce_boolean_decision(True, all=True) and not strategy.reduce_boolean_decision(False, all=False)
    assert strategy.check_same("fit: idle -> fitting.setup") is None
    assert strategy.all_gather_object({"a": 1}) == [{"a": 1}]
    value = torch.tensor([1.0, 2.0])
    assert strategy.all_gather(value) is value and strategy.reduce(value, reduce_op="sum") is value


# ---- SLURM auto-requeue -------------------------------------------------------------------------------------


class RequeuedModel(RankModel):
    """SLURM sends the requeue signal after the second optimizer step."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == 2 and not getattr(self, "signalled", False):
            self.signalled = True
            os.kill(os.getpid(), signal.SIGUSR1)


class StartStep(RankModel):
    def on_train_start(self) -> None:
        self.start_step = self.global_step


def test_slurm_requeue_signal_saves_an_hpc_checkpoint_requeues_and_the_next_run_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm = {"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    slurm |= {"SLURM_JOB_ID": "4242", "SLURM_NODELIST": "127.0.0.1", "SLURM_JOB_NAME": "train"}
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    stand_in = tmp_path / "bin" / "scontrol"  # records its arguments instead of talking to SLURM
    stand_in.parent.mkdir()
    stand_in.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "run"

    first = _trainer(root, max_epochs=1, enable_checkpointing=False)
    with pytest.raises(ValueError, match=r'ckpt_path="hpc"\)` is set but no HPC checkpoint was found'):
        first.fit(RankModel(), loader(4), ckpt_path="hpc")
    first.fit(RequeuedModel(), loader(4))
    assert (tmp_path / "scontrol.calls").read_text() == "requeue 4242\n"
    saved = torch.load(root / "hpc_ckpt_1.ckpt", weights_only=False)
    assert saved["global_step"] == 2

    requeued = _trainer(root, max_epochs=1, enable_checkpointing=False)
    resumed = StartStep()
    requeued.fit(resumed, loader(4))  # ckpt_path=None under SLURM with an hpc checkpoint: resume from it
    assert resumed.start_step == 2 and requeued.global_step == 8


# ---- collectives across two real ranks ------------------------------------------------------------------------


def _agree(strategy: Any) -> dict[str, Any]:
    rank = strategy.global_rank
    return {
        "any": strategy.reduce_boolean_decision(rank == 1, all=False),
        "all": strategy.reduce_boolean_decision(rank == 1, all=True),
        "same": strategy.check_same("fit: idle -> fitting.setup"),
        "differ": strategy.check_same(f"edge taken by rank {rank}"),
        "broadcast": strategy.broadcast(f"from rank {rank}", src=1),
        "objects": strategy.all_gather_object(rank * 10),
        "sum": strategy.reduce(torch.tensor(rank + 1.0), reduce_op="sum").item(),
        "uneven_max": strategy.reduce(torch.tensor(rank * 3), reduce_op="max").item(),
        "started": strategy.start_reduce(torch.tensor([rank, 1 - rank]), "max")().tolist(),
    }


def test_decisions_and_checks_agree_across_two_ranks() -> None:
    strategy = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", logger=False).strategy
    result = strategy.launcher.launch(_agree, strategy)
    assert result == {
        "any": True,
        "all": False,
        "same": None,
        "differ": ["edge taken by rank 0", "edge taken by rank 1"],
        "broadcast": "from rank 1",
        "objects": [0, 10],
        "sum": 3.0,
        "uneven_max": 3,
        "started": [1, 1],
    }


class SkipsSanityOnRankOne(RankModel):
    def setup(self, stage: str) -> None:
        if self.global_rank == 1:
            self.trainer.num_sanity_val_steps = 0


def test_check_ranks_switch_names_each_ranks_edge_when_ranks_diverge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CHECK_RANKS_VARIABLE, "1")
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, num_sanity_val_steps=2)
    with pytest.raises(RankFailedError) as info:
        trainer.fit(SkipsSanityOnRankOne(), loader(4), loader(4))
    message = str(info.value)
    assert "RankDivergenceError: ranks took different transitions" in message
    assert "rank 0: begin: fitting.setup -> fitting.sanity_checking [should_sanity_check]" in message
    assert "rank 1: begin: fitting.setup -> fitting.train_setup [not should_sanity_check]" in message


def test_sync_batchnorm_converts_under_ddp_and_is_refused_for_one_process() -> None:
    strategy = L.Trainer(accelerator="cpu", devices=1, strategy="ddp", sync_batchnorm=True, logger=False).strategy
    module = strategy.setup_module(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)))
    assert isinstance(module[1], torch.nn.SyncBatchNorm)
    with pytest.raises(L.MisconfigurationException, match="sync_batchnorm=True needs a multi-process strategy"):
        L.Trainer(accelerator="cpu", devices=1, sync_batchnorm=True)


class RecordsIndices(RankModel):
    """Writes, per rank, the sample indices each epoch trained on."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.seen: dict[int, list[int]] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(batch[2].tolist())
        return super().training_step(batch, batch_idx)

    def on_train_end(self) -> None:
        (self.folder / f"rank{self.global_rank}.json").write_text(json.dumps(self.seen))


def test_a_forked_rank_never_collects_garbage_it_inherited(tmp_path: Path) -> None:
    # Uncollected garbage owning a thread (a finished run's rendezvous store in a reference cycle) would hang a
    # forked rank whose collector ran its destructor. A hang is this test's failure: it runs in a child process,
    # given a generous limit.
    script = Path(__file__).resolve().parent / "scripts" / "fork_with_garbage.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "finished"


@pytest.mark.parametrize("use_distributed_sampler", [True, False])
def test_each_rank_reads_its_share_reshuffled_every_epoch_unless_switched_off(
    tmp_path: Path, use_distributed_sampler: bool
) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, use_distributed_sampler=use_distributed_sampler)
    trainer.fit(RecordsIndices(tmp_path), loader(4, shuffle=True))
    first, second = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1))
    for epoch in ("0", "1"):
        if use_distributed_sampler:
            assert sorted(first[epoch] + second[epoch]) == list(range(32))  # disjoint halves, together all
        else:
            assert sorted(first[epoch]) == sorted(second[epoch]) == list(range(32))  # loaders untouched
    if use_distributed_sampler:
        assert first["0"] != first["1"]  # set_epoch: a new order each epoch


class WritesWhereItStopped(RankModel):
    """Each rank writes `rank<R>.json`: its global step when fit ended, `should_stop` then and as each training
    batch started, and the global steps its validations started at."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.read_should_stop: list[bool] = []
        self.validated_at: list[int] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.read_should_stop.append(self.trainer.should_stop)

    def on_validation_start(self) -> None:
        self.validated_at.append(self.global_step)

    def on_train_end(self) -> None:
        record = {
            "global_step": self.global_step,
            "should_stop": self.trainer.should_stop,
            "read_should_stop": self.read_should_stop,
            "validated_at": self.validated_at,
            "weights": [p.tolist() for p in self.parameters()],
        }
        (self.folder / f"rank{self.global_rank}.json").write_text(json.dumps(record))


class StopsOnRankOne(WritesWhereItStopped):
    """Only rank 1's code sets should_stop, after its second batch. `wide`: gradients in several of DDP's buckets."""

    def __init__(self, folder: Path, wide: bool = False) -> None:
        super().__init__(folder)
        if wide:
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 2))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_rank == 1 and self.global_step == 2:
            self.trainer.should_stop = True


class StopsOnRankOneStepByHand(StopsOnRankOne):
    """Manual optimization."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss = super().training_step(batch, batch_idx)
        self.manual_backward(loss)
        optimizer.step()
        return loss


class StopsOnRankOneWithLBFGS(StopsOnRankOne):
    """An optimizer that runs the step (and its backward) several times per batch."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)


class StopsOnRankOneOptimizingTheWrappedModel(StopsOnRankOne):
    """An optimizer over `trainer.model`'s parameters: DDP's wrapper's, which include the trainer's own."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.trainer.model.parameters(), lr=0.1)


@pytest.mark.parametrize(
    ("make_module", "ddp_kwargs"),
    [
        (StopsOnRankOne, {}),
        (lambda folder: StopsOnRankOne(folder, wide=True), {}),
        (StopsOnRankOne, {"find_unused_parameters": True}),
        (StopsOnRankOne, {"static_graph": True}),
        (StopsOnRankOneStepByHand, {}),
        (StopsOnRankOneStepByHand, {"find_unused_parameters": True}),
        (StopsOnRankOneStepByHand, {"static_graph": True}),
        (StopsOnRankOneWithLBFGS, {}),
        (StopsOnRankOneOptimizingTheWrappedModel, {}),
    ],
    ids=[
        "one bucket",
        "several buckets",
        "find_unused_parameters",
        "static_graph",
        "manual",
        "manual, find_unused_parameters",
        "manual, static_graph",
        "LBFGS",
        "trainer.model",
    ],
)
def test_should_stop_set_on_one_rank_stops_every_rank_at_the_same_batch(
    tmp_path: Path, make_module: Any, ddp_kwargs: dict[str, Any]
) -> None:
    strategy = DDPStrategy(start_method="fork", **ddp_kwargs)
    trainer = _trainer(tmp_path, strategy=strategy, devices=2, max_epochs=5)
    trainer.fit(make_module(tmp_path), loader(4))  # 32 samples, 2 ranks, batch 4: 4 batches a rank and epoch
    first, second = _ranks(tmp_path)
    # The ranks agree on their flags while the next batch runs: every rank stops after that next batch, the third
    # of four, and reads the same should_stop at every batch (rank 1's own request shows once they agreed).
    assert first["global_step"] == second["global_step"] == 3
    assert first["should_stop"] and second["should_stop"]
    assert first["read_should_stop"] == second["read_should_stop"] == [False, False, False]
    # Each rank read other samples: the same weights on both show that every step's gradients were all-reduced.
    assert first["weights"] == second["weights"]
    # Rank 0's history (handed back to this process): fit ended normally, for that reason.
    stop = trainer.history[-1]
    assert (stop.trigger, stop.dest, stop.epoch, stop.global_step) == ("epoch_boundary", "finished", 1, 3)
    assert stop.guards[-1].reason == "`trainer.should_stop` was set"


class StopsOnRankOneAtItsThirdBatch(StopsOnRankOne):
    """Only rank 1's code sets should_stop, after its third batch (mid-way through an accumulation)."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_rank == 1 and batch_idx == 2:
            self.trainer.should_stop = True


def test_should_stop_set_on_one_rank_while_gradients_accumulate_stops_every_rank_at_the_same_batch(
    tmp_path: Path,
) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=3, accumulate_grad_batches=2)
    trainer.fit(StopsOnRankOneAtItsThirdBatch(tmp_path), loader(4, samples=64))  # 8 batches a rank and epoch
    first, second = _ranks(tmp_path)
    # Each batch's backward carries the flags sent after the one before: raised after batch 2, agreed after batch 3,
    # whose optimizer step is the epoch's second.
    assert first["read_should_stop"] == second["read_should_stop"] == [False] * 4
    assert first["global_step"] == second["global_step"] == 2
    assert first["weights"] == second["weights"]


class ReadsFlagsBehind(DDPStrategy):
    """Reads the agreed flags a batch late, as on a GPU (where reading them at once would make the host wait for
    the device), here on the host."""

    @property
    def flags_read_behind(self) -> bool:
        return True


@pytest.mark.parametrize(
    "make_module", [StopsOnRankOne, StopsOnRankOneStepByHand], ids=["riding the gradients", "own collective"]
)
def test_flags_read_a_batch_late_stop_every_rank_at_the_same_batch_one_batch_later(
    tmp_path: Path, make_module: Any
) -> None:
    trainer = _trainer(tmp_path, strategy=ReadsFlagsBehind(start_method="fork"), devices=2, max_epochs=5)
    trainer.fit(make_module(tmp_path), loader(4, samples=64))  # 8 batches a rank and epoch
    first, second = _ranks(tmp_path)
    # Raised after the second batch, agreed over the third, read after the fourth.
    assert first["global_step"] == second["global_step"] == 4
    assert first["read_should_stop"] == second["read_should_stop"] == [False] * 4
    assert first["weights"] == second["weights"]


class StopsOnRankOneAtItsThirdBatchStepByHand(StopsOnRankOneAtItsThirdBatch, StopsOnRankOneStepByHand):
    """Manual optimization."""


@pytest.mark.parametrize(
    "make_module",
    [StopsOnRankOneAtItsThirdBatch, StopsOnRankOneAtItsThirdBatchStepByHand],
    ids=["riding the gradients", "own collective"],
)
def test_flags_read_a_batch_late_are_not_lost_at_the_epochs_end(tmp_path: Path, make_module: Any) -> None:
    trainer = _trainer(tmp_path, strategy=ReadsFlagsBehind(start_method="fork"), devices=2, max_epochs=5)
    trainer.fit(make_module(tmp_path), loader(4))  # 4 batches a rank and epoch
    first, second = _ranks(tmp_path)
    # Agreed over the epoch's last batch, not read by a batch after it: read when the epoch ends, which stops the
    # run before a second epoch.
    assert first["global_step"] == second["global_step"] == 4
    assert first["read_should_stop"] == second["read_should_stop"] == [False] * 4
    assert first["weights"] == second["weights"]


class ClockAheadOnRankOne(WritesWhereItStopped):
    """Validation an hour after the last: after its second batch, only rank 1's clock says the hour has passed."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_rank == 1 and self.global_step == 2:
            self.trainer.fit_loop.last_val_end_time -= 3600


def test_time_based_validation_runs_on_every_rank_when_one_ranks_clock_says_so(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=2, val_check_interval=timedelta(hours=1))
    trainer.fit(ClockAheadOnRankOne(tmp_path), loader(4), loader(4))
    first, second = _ranks(tmp_path)
    # Once, after the batch that follows the one rank 1's clock passed the hour at; then both clocks restart.
    assert first["validated_at"] == second["validated_at"] == [3]
    assert first["global_step"] == second["global_step"] == 8


class Linear(L.LightningModule):
    """The least a rank can train: no collective of its own beyond DDP's and the trainer's."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class CountsCollectives(Linear):
    """Each rank writes how many collectives its process group ran from the start of batch 2 to that of batch 5
    (from batch 2 on, DDP has rebuilt its buckets, which it agrees on in collectives of its own), and how many
    gradient buckets DDP all-reduces (one collective each)."""

    def __init__(self, folder: Path, wide: bool) -> None:
        super().__init__()
        self.folder = folder
        self.started_at = 0
        if wide:
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 2))

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        group = torch.distributed.distributed_c10d._get_default_group()
        # torch's own count of the collectives a group ran (no public call gives it; bound in C++, without a stub)
        count = group._get_sequence_number_for_group()  # type: ignore[attr-defined]
        if batch_idx == 2:
            self.started_at = count
        elif batch_idx == 5:
            buckets = self.trainer.strategy.model.reducer._get_zeros_like_grad_buckets()
            record = {"collectives": count - self.started_at, "buckets": len(buckets)}
            (self.folder / f"rank{self.global_rank}.json").write_text(json.dumps(record))


@pytest.mark.parametrize("wide", [False, True], ids=["one bucket", "several buckets"])
def test_the_ranks_flags_ride_ddps_gradient_all_reduce(tmp_path: Path, wide: bool) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=1, enable_checkpointing=False)
    trainer.fit(CountsCollectives(tmp_path, wide), loader(4, samples=48))  # 6 batches a rank
    first, second = _ranks(tmp_path)
    assert first["buckets"] == second["buckets"] == (2 if wide else 1)
    # Batches 2 to 4 ran only their gradient all-reduce, one collective a bucket, which carried the flags the ranks
    # agree on (should_stop, a SIGTERM, the validation clock), sent after the batch before.
    assert first["collectives"] == second["collectives"] == 3 * first["buckets"]


def counting_all_reduce(state, bucket):  # unannotated: DDP refuses postponed (string) annotations
    state["calls"] += 1
    return default_hooks.allreduce_hook(torch.distributed.distributed_c10d._get_default_group(), bucket)


class WritesHookCalls(StopsOnRankOne):
    """Rank 1 sets should_stop after its second batch; each rank writes how often its communication hook ran."""

    def __init__(self, folder: Path, hook_state: dict[str, int]) -> None:
        super().__init__(folder, wide=False)
        self.hook_state = hook_state

    def on_train_end(self) -> None:
        super().on_train_end()
        path = self.folder / f"rank{self.global_rank}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "hook_calls": self.hook_state["calls"]}))


def test_a_users_communication_hook_all_reduces_the_gradients_and_the_ranks_still_agree(tmp_path: Path) -> None:
    hook_state = {"calls": 0}  # each forked rank counts in its own copy
    strategy = DDPStrategy(start_method="fork", ddp_comm_state=hook_state, ddp_comm_hook=counting_all_reduce)
    trainer = _trainer(tmp_path, strategy=strategy, devices=2, max_epochs=5)
    trainer.fit(WritesHookCalls(tmp_path, hook_state), loader(4))
    first, second = _ranks(tmp_path)
    # The hook ran once per backward (one bucket), and should_stop, agreed beside it, stopped both ranks at once.
    assert first["hook_calls"] == second["hook_calls"] == first["global_step"] == second["global_step"] == 3


class FailsAfterItsLastBatch(Linear):
    """Rank 1 raises after the epoch's last batch, before its flags go out: rank 0 is left waiting for them."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_rank == 1 and batch_idx == 3:
            raise ValueError("rank 1 fails after its last batch")


def test_a_rank_failing_while_the_others_wait_for_its_flags_ends_every_rank(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, enable_checkpointing=False)
    began = time.monotonic()
    with pytest.raises(RankFailedError, match="rank 1 failed first: ValueError: rank 1 fails after its last batch"):
        trainer.fit(FailsAfterItsLastBatch(), loader(4))
    assert time.monotonic() - began < ENDS_WITHIN
    dumps = _dumps(tmp_path)
    assert list(dumps) == [0, 1]
    stopped = load_history(dumps[0]).records[-1]
    assert stopped.trigger == "interrupt" and stopped.exception is not None
    assert (stopped.exception.type, stopped.exception.message) == (
        "PeerFailedError",
        "rank 1 failed first: ValueError: rank 1 fails after its last batch",
    )


class StallsAfterItsLastBatch(Linear):
    """Rank 2 hangs after the epoch's last batch, before its flags go out: ranks 0 and 1 wait for them."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_rank == 2 and batch_idx == 3:
            threading.Event().wait()


def test_ranks_waiting_for_a_stalled_ranks_flags_name_that_rank_alone(tmp_path: Path) -> None:
    # Ranks 0 and 1 wait in the same collective, so neither may be taken for a stalled rank.
    strategy = DDPStrategy(timeout=timedelta(seconds=5), start_method="fork")
    trainer = _trainer(tmp_path, strategy=strategy, devices=3, max_epochs=1, enable_checkpointing=False)
    with pytest.raises(RankFailedError, match="StalledRankError: rank 2 did not reach the next agreement"):
        trainer.fit(StallsAfterItsLastBatch(), loader(4, samples=48))  # 4 batches a rank


class NoValidationBatchesOnRankOne(Linear):
    """Rank 1's validation loader is empty; each rank writes what it validated and the warnings it saw."""

    def __init__(self, folder: Path, allow: bool) -> None:
        super().__init__()
        self.folder = folder
        self.allow_zero_length_dataloader_with_multiple_devices = allow
        self.validated: list[int] = []

    def val_dataloader(self) -> DataLoader:
        return loader(4, samples=0 if self.global_rank == 1 else 32)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.validated.append(batch_idx)

    def on_fit_end(self) -> None:
        (self.folder / f"rank{self.global_rank}.json").write_text(json.dumps({"validated": self.validated}))


def test_a_loader_empty_on_one_rank_stops_every_rank_at_once_naming_it(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=1, enable_checkpointing=False)
    began = time.monotonic()
    # Lightning's words on the empty rank; every rank names the empty one, instead of waiting out the timeout.
    with pytest.raises(RankFailedError, match=r"`val_dataloader` gives no batches on rank\(s\) \[1\] of 2") as failed:
        trainer.fit(NoValidationBatchesOnRankOne(tmp_path, allow=False), loader(4))
    assert time.monotonic() - began < ENDS_WITHIN
    assert "zero length" in str(failed.value) and "allow_zero_length_dataloader_with_multiple_devices" in str(
        failed.value
    )
    assert sorted(_dumps(tmp_path)) == [0, 1]


def test_a_loader_empty_on_one_rank_runs_when_the_module_allows_it(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=1, enable_checkpointing=False)
    with warnings.catch_warnings():  # the empty rank's warning goes to its own stderr
        warnings.simplefilter("ignore", TrainerWarning)
        trainer.fit(NoValidationBatchesOnRankOne(tmp_path, allow=True), loader(4))
    first, second = _ranks(tmp_path)
    assert first["validated"] == [0, 1, 2, 3] and second["validated"] == []  # rank 0's 16 samples in batches of 4


class RecordsItsWarnings(Linear):
    """Each rank writes the PossibleUserWarnings its call gave and the sample indices it validated."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.indices: list[int] = []

    def setup(self, stage: str) -> None:
        self.catcher = warnings.catch_warnings(record=True)
        self.seen = self.catcher.__enter__()
        warnings.simplefilter("always")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.indices.extend(batch[2].tolist())

    def teardown(self, stage: str) -> None:
        self.catcher.__exit__(None, None, None)
        said = [str(w.message) for w in self.seen if issubclass(w.category, L.PossibleUserWarning)]
        (self.folder / f"rank{self.global_rank}.json").write_text(json.dumps({"said": said, "indices": self.indices}))


def test_validate_on_two_ranks_says_how_many_samples_the_split_repeats(tmp_path: Path) -> None:
    _trainer(tmp_path, strategy="ddp_fork", devices=2).validate(RecordsItsWarnings(tmp_path), loader(4, samples=31))
    first, second = _ranks(tmp_path)
    (said,) = [text for text in first["said"] if "DistributedSampler" in text]
    assert "During `trainer.validate()`, it is recommended to use `Trainer(devices=1, num_nodes=1)`" in said
    assert said.endswith("Here 1 sample(s) are evaluated twice to give each of the 2 ranks as many batches.")
    assert not [text for text in second["said"] if "DistributedSampler" in text]  # rank zero says it
    assert sorted(first["indices"] + second["indices"]) == [0, *range(31)]  # the one repeated: the first sample


def test_the_validation_inside_fit_does_not_warn_about_repeated_samples(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, strategy="ddp_fork", devices=2, max_epochs=1, enable_checkpointing=False)
    trainer.fit(RecordsItsWarnings(tmp_path), loader(4), loader(4, samples=31))
    first, _ = _ranks(tmp_path)
    assert not [text for text in first["said"] if "DistributedSampler" in text]


class TerminatedOnRankOne(SeededRanks):
    """Rank 1 receives SIGTERM (as a preempted job does) during its training step at `step`."""

    def __init__(self, step: int | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.terminate_at = step

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_rank == 1 and self.global_step == self.terminate_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)


def test_sigterm_to_one_rank_stops_every_rank_with_one_checkpoint_that_resumes_exactly(tmp_path: Path) -> None:
    shuffled = loader(4, shuffle=True)
    uninterrupted = TerminatedOnRankOne(dropout=0.5)
    start = copy.deepcopy(uninterrupted)
    _trainer(tmp_path / "straight", strategy="ddp_fork", devices=2).fit(uninterrupted, shuffled)

    saves = L.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_on_exception=True, save_top_k=0)
    preempted = copy.deepcopy(start)
    preempted.terminate_at = 5  # the second batch of the second epoch
    with pytest.raises(RankFailedError, match="SIGTERMException"):
        _trainer(tmp_path / "first", strategy="ddp_fork", devices=2, callbacks=[saves]).fit(preempted, shuffled)
    (saved,) = (tmp_path / "ckpt").glob("*.ckpt")
    checkpoint = torch.load(saved, weights_only=False)
    # Both ranks stopped after the same batch: the one after rank 1 was told, as the ranks agree on a SIGTERM while
    # the next batch runs.
    assert checkpoint["global_step"] == 7
    assert len(checkpoint["statemachine_resume"]["per_rank"]) == 2  # every rank's random state, gathered

    resumed = copy.deepcopy(start)
    with warnings.catch_warnings():
        # The forked ranks inherit this filter: the resume has no ModelCheckpoint, so its saved state is unused.
        warnings.filterwarnings("ignore", message=".* holds state for callbacks that are not in this run")
        resume = _trainer(tmp_path / "resume", strategy="ddp_fork", devices=2, enable_checkpointing=False)
        resume.fit(resumed, shuffled, ckpt_path=saved)
    assert weights(resumed) == weights(uninterrupted)  # bit-exact


class TerminatesItsLauncher(SeededRanks):
    """Rank 0 sends SIGTERM to the process that launched the ranks, as a cluster preempting the job would.

    It does so once both ranks are inside batch 5 (so both have sent their flags for after batch 4), and goes on
    only once the launcher's forward has reached it (so its flags sent after batch 5 carry it, whenever the forward
    reaches rank 1): the ranks agree on it after batch 6 and stop there, at global step 7, however loaded the
    machine is."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_step == 5:
            torch.distributed.barrier()
            if self.global_rank == 0:
                os.kill(os.getppid(), signal.SIGTERM)
                deadline = time.monotonic() + 60
                while not self.trainer.received_sigterm and time.monotonic() < deadline:
                    time.sleep(0.01)  # polls for the forwarded signal; the deadline only bounds a broken forward
        return super().training_step(batch, batch_idx)


def test_sigterm_to_the_launching_process_reaches_every_rank(tmp_path: Path) -> None:
    saves = L.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_on_exception=True, save_top_k=0)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RankFailedError, match="SIGTERMException"):
        _trainer(tmp_path, strategy="ddp_fork", devices=2, callbacks=[saves]).fit(TerminatesItsLauncher(), loader(4))
    assert signal.getsignal(signal.SIGTERM) is handler  # this process's own handler is back
    (saved,) = (tmp_path / "ckpt").glob("*.ckpt")
    checkpoint = torch.load(saved, weights_only=False)
    assert checkpoint["global_step"] == 7 and len(checkpoint["statemachine_resume"]["per_rank"]) == 2


@pytest.mark.parametrize("fail", [False, True], ids=["fit", "failed-fit"])
def test_a_process_group_made_before_the_trainer_is_joined_and_left_standing(tmp_path: Path, fail: bool) -> None:
    script = Path(__file__).resolve().parent / "scripts" / "adopted_group.py"
    rank_variables = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")
    env = {key: value for key, value in os.environ.items() if key not in rank_variables}
    port = str(find_free_port())
    options = ["--fail"] if fail else []
    ranks = [
        subprocess.Popen([sys.executable, str(script), str(rank), port, str(tmp_path), *options], env=env)
        for rank in (0, 1)
    ]
    assert [process.wait(timeout=120) for process in ranks] == [0, 0]

    first, second = _ranks(tmp_path)
    for rank, seen in enumerate((first, second)):
        assert (seen["world_size"], seen["global_rank"], seen["strategy"]) == (2, rank, "DDPStrategy")
        assert seen["standing"] and seen["reduced"] == 1.0  # the same group, still usable: 0 + 1
    if fail:
        assert first["failed"] == second["failed"] == "every rank fails at step 1"
    else:
        # 32 samples over 2 ranks in batches of 8: each rank trains on its half; DDP keeps the replicas equal
        assert first["steps"] == second["steps"] == 2 and first["weights"] == second["weights"]


def test_a_fit_inside_ray_train_joins_the_group_ray_made(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parent / "scripts" / "ray_fit.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    first, second = _ranks(tmp_path)
    for rank, seen in enumerate((first, second)):
        assert (seen["rank"], seen["world_size"], seen["strategy"]) == (rank, 2, "DDPStrategy")
        assert seen["same_group"]
    # each worker trains on its half (2 steps of 8 of the 32 samples) and DDP keeps the replicas equal
    assert first["steps"] == second["steps"] == 2 and first["weights"] == second["weights"]
