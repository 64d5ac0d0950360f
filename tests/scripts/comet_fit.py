"""A user's training script with an offline CometLogger, run in its own process because Comet writes the offline
archive, and records a crash, when the process exits. Two epochs of four batches with validation, metrics every
two steps, the archive under OUT/comet. Each rank writes OUT/rank<R>.json with what its logger said; with --fail,
training_step raises at global step 5 and the exception leaves the script; with --ddp, two CPU processes.

    python tests/scripts/comet_fit.py OUT [--fail] [--ddp]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import COMET_QUICK, FailingAtStep, make_loader

import statemachine as L
from statemachine.loggers import CometLogger


class Model(FailingAtStep):
    def on_train_end(self) -> None:
        # user code that talks to Comet directly: on a rank other than zero the experiment takes it and does nothing
        self.logger.experiment.log_other("trained_on_rank", self.global_rank)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--ddp", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    logger = CometLogger(
        online=False, project="tiny-project", name="tiny-run", offline_directory=str(out / "comet"), **COMET_QUICK
    )
    distributed = {"strategy": "ddp", "devices": 2, "accelerator": "cpu"} if args.ddp else {}
    trainer = L.Trainer(
        max_epochs=2,
        logger=logger,
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
        **distributed,
    )
    model = Model(optimizer={"name": "sgd", "momentum": 0.0}, fail_at_step=5 if args.fail else -1)
    try:
        trainer.fit(model, make_loader(), make_loader())
    finally:
        said = {
            "name": logger.name,
            "version": logger.version,
            "save_dir": logger.save_dir,
            "experiment": type(logger.experiment).__name__,
        }
        (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(said))


if __name__ == "__main__":
    main()
