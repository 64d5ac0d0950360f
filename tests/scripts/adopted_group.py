"""One rank of a job that makes its own gloo process group before any Trainer, as Ray Train's workers or a custom
launcher do, with no rank variables in the environment. The Trainer must join that group and leave it standing.
Writes OUT/rank<R>.json with what the rank saw; with --fail, every rank raises at global step 1 and catches it.

    python tests/scripts/adopted_group.py RANK PORT OUT [--fail]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import quiet_trainer
from ddp_app import RankModel, loader


class Failing(RankModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_step == 1:
            raise ValueError("every rank fails at step 1")
        return super().training_step(batch, batch_idx)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rank", type=int)
    parser.add_argument("port", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=2)
    group = dist.group.WORLD
    model = Failing() if args.fail else RankModel()
    trainer = quiet_trainer(args.out, accelerator="cpu", max_epochs=1, num_sanity_val_steps=0)
    failed = None
    try:
        trainer.fit(model, loader(8))
    except ValueError as error:
        failed = str(error)
    standing = dist.is_initialized() and dist.group.WORLD is group
    total = torch.tensor([float(args.rank)])
    dist.all_reduce(total)  # the user's group still works after the trainer is done with it
    report = {
        "world_size": trainer.world_size,
        "global_rank": trainer.global_rank,
        "strategy": type(trainer.strategy).__name__,
        "steps": trainer.global_step,
        "weights": [p.detach().flatten().tolist() for p in model.parameters()],
        "standing": standing,
        "reduced": total.item(),
        "failed": failed,
    }
    (args.out / f"rank{args.rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Exit without Python's finalization: in torch 2.13 a gloo worker thread may still be releasing the state of the
    # last collective (here the script's own all_reduce) when the interpreter finalizes; the GIL it then asks for
    # ends its thread inside a C++ destructor, which aborts the process ("terminate called without an active
    # exception", exit -6): a race in torch, after the trainer is done. Everything this script reports is written above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
