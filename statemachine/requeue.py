"""SLURM auto-requeue: on the requeue signal, save `hpc_ckpt_<n>.ckpt` and ask SLURM to requeue the job; a later
run under SLURM resumes from the newest such file (`ckpt_path="hpc"`, or `None` when one exists)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
from typing import TYPE_CHECKING, Any

import fsspec

from devices.environments import SLURMEnvironment

if TYPE_CHECKING:
    from stages.contract import TrainerView

_log = logging.getLogger(__name__)
_HPC = re.compile(r"hpc_ckpt_(\d+)\.ckpt$")


def slurm_environment(trainer: TrainerView) -> SLURMEnvironment | None:
    """The trainer's SLURM environment when it runs under SLURM with auto-requeue on."""
    env = trainer.strategy.cluster_environment
    if isinstance(env, SLURMEnvironment) and env.auto_requeue:
        return env
    return None


def newest_hpc_checkpoint(root: str) -> str | None:
    """`root/hpc_ckpt_<n>.ckpt` with the highest n, or None."""
    fs, path = fsspec.core.url_to_fs(root)
    if not fs.isdir(path):
        return None
    numbered = [(int(found.group(1)), name) for name in fs.ls(path, detail=False) if (found := _HPC.search(name))]
    if not numbered:
        return None
    return os.path.join(root, os.path.basename(max(numbered)[1]))


def next_hpc_path(root: str) -> str:
    newest = newest_hpc_checkpoint(root)
    found = None if newest is None else _HPC.search(newest)
    number = 0 if found is None else int(found.group(1))
    return os.path.join(root, f"hpc_ckpt_{number + 1}.ckpt")


def on_requeue_signal(trainer: TrainerView, env: SLURMEnvironment) -> None:
    """Loggers finish, every rank saves the checkpoint together (rank 0 writes), and rank 0 requeues the job."""
    _log.info("received %s: saving an hpc checkpoint and requeueing the job", env.requeue_signal.name)
    for logger in trainer.loggers:
        logger.finalize("finished")
    path = next_hpc_path(trainer.default_root_dir)
    trainer.save_checkpoint(path)
    if not trainer.is_global_zero:
        return
    command = ["scontrol", "requeue", env.job_id]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # a fixed command, no shell
    except FileNotFoundError:
        _log.error("cannot requeue: `scontrol` is not on PATH (saved %s)", path)
        return
    if result.returncode == 0:
        _log.info("requeued SLURM job %s; resume with ckpt_path='hpc' (saved %s)", env.job_id, path)
    else:
        _log.error("`%s` failed with code %d: %s", " ".join(command), result.returncode, result.stderr.strip())


def resume_path(trainer: TrainerView, fn: str) -> str:
    found = newest_hpc_checkpoint(trainer.default_root_dir)
    if found is None:
        raise ValueError(
            f'`.{fn}(ckpt_path="hpc")` is set but no HPC checkpoint was found: no hpc_ckpt_<n>.ckpt in '
            f"{trainer.default_root_dir!r}. Please pass an exact checkpoint path to `.{fn}(ckpt_path=...)`"
        )
    return found


def auto_resume(trainer: TrainerView) -> Any:
    """`ckpt_path=None` under SLURM with an hpc checkpoint means "hpc" (a requeued job continues by itself)."""
    if slurm_environment(trainer) is None:
        return None
    return "hpc" if newest_hpc_checkpoint(trainer.default_root_dir) is not None else None
