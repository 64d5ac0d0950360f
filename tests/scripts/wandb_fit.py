"""A user's training script with a WandbLogger, run in its own process because W&B records a run's outcome when
the process exits. Two epochs of four batches with validation, a ModelCheckpoint on `val_loss` (top 1 and
`last.ckpt`), metrics every two steps. Writes OUT/script.json with what the logger and the checkpoint callback
said; with --fail, training_step raises at global step 3.

    python tests/scripts/wandb_fit.py OUT [--log-model {false,true,all}] [--fail] [--test] [--spawn]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import FailingAtStep, make_loader

import statemachine as L
from statemachine.callbacks import ModelCheckpoint
from statemachine.loggers import WandbLogger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--log-model", choices=["false", "true", "all"], default="false")
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--test", action="store_true")
    parser.add_argument("--spawn", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    torch.manual_seed(0)
    log_model = {"false": False, "true": True, "all": "all"}[args.log_model]
    logger = WandbLogger(save_dir=out, name="tiny-run", log_model=log_model)
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=1, save_last=True)
    distributed = {"strategy": "ddp_spawn", "devices": 2, "accelerator": "cpu"} if args.spawn else {}
    trainer = L.Trainer(
        max_epochs=2,
        logger=logger,
        log_every_n_steps=2,
        callbacks=[checkpoint],
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
        **distributed,
    )
    model = FailingAtStep(optimizer={"name": "sgd", "momentum": 0.0}, fail_at_step=3 if args.fail else -1)
    try:
        trainer.fit(model, make_loader(), make_loader())
        if args.test:
            trainer.test(model, make_loader())
    finally:
        said = {
            "name": logger.name,
            "version": logger.version,
            "save_dir": logger.save_dir,
            "checkpoint_dir": checkpoint.dirpath,
            "best_model_path": checkpoint.best_model_path,
            "last_model_path": checkpoint.last_model_path,
        }
        (out / "script.json").write_text(json.dumps(said))


if __name__ == "__main__":
    main()
