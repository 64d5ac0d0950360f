"""A fit inside Ray Train: `ray.train.torch.TorchTrainer` with 2 CPU workers on a local Ray cluster. Ray makes each
worker's gloo process group before the training function runs; the Trainer must join it. Each worker writes
OUT/rank<R>.json with what it saw.

    python tests/scripts/ray_fit.py OUT
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

TESTS = Path(__file__).resolve().parents[1]


def train_loop_per_worker(config: dict[str, Any]) -> None:
    import torch.distributed as dist
    from conftest import quiet_trainer
    from ddp_app import RankModel, loader, weights

    group_before = dist.group.WORLD
    model = RankModel()
    trainer = quiet_trainer(config["out"], accelerator="cpu", num_sanity_val_steps=0)
    trainer.fit(model, loader(8))
    record = {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "strategy": type(trainer.strategy).__name__,
        "steps": trainer.global_step,
        "weights": weights(model),
        "same_group": dist.is_initialized() and dist.group.WORLD is group_before,
    }
    (Path(config["out"]) / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def main(out: str) -> None:
    # the workers import the test helpers; Ray starts them with this environment
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"out": out},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=str(Path(out) / "ray"), name="fit"),
        )
        trainer.fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
