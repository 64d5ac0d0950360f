"""Extend the trainer's machine: a `fitting.calibrating` stage that fits a softmax temperature on the
validation set once training is done, before fit tears down (the digits classifier of `digits.py`).

    python examples/calibration.py [--epochs N] [--root DIR]

The new state, its handler and its edges are declared data, like the built-in table: the diagram, the
history check and transition coverage all see them (`python -m statemachine.engine.diagram --table
calibration:CALIBRATED -o DIR`, run from this folder).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch
from digits import DigitsClassifier, DigitsData
from torch import nn

import statemachine as L

# The built-in stop edge: when fit is done at an epoch boundary, go to `finished` through the fit-end chain.
STOP = L.TABLE.by_key["epoch_boundary: fitting.between_epochs -> finished [fit_done]"]


def calibrate(run: Any) -> str:
    """`fitting.calibrating`: fit `model.temperature` by minimising the validation NLL of logits / T (the handler
    receives the run in flight: its model, its trainer, ...)."""
    model = run.model
    model.eval()
    with torch.no_grad():
        batches = [(model(x.to(model.device)), y.to(model.device)) for x, y in run.trainer.val_dataloaders]
    logits, labels = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    log_t = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_t], lr=0.1, max_iter=100)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    model.temperature = float(log_t.detach().exp())
    return "calibrated"


CALIBRATED = L.TABLE.extend(
    name="trainer+calibration",
    states=[
        L.StateSpec(
            name="fitting.calibrating",
            status=L.TrainerStatus.RUNNING,
            fn=L.TrainerFn.FITTING,
            stage=L.RunningStage.VALIDATING,
            handler="calibrate",
            doc="fits a softmax temperature on the validation set",
        )
    ],
    transitions=[
        # Fit is done: end training (on_train_end), then calibrate instead of stopping at once ...
        STOP.model_copy(update={"dest": "fitting.calibrating", "before": ("end_training",)}),
        # ... and once calibrated, the rest of the built-in stop chain.
        L.TransitionSpec(trigger="calibrated", source="fitting.calibrating", dest="finished", before=STOP.before[1:]),
    ],
    remove=[STOP.key],
    handlers={"calibrate": calibrate},
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "runs", "calibration"))
    args = parser.parse_args()

    L.seed_everything(0)
    trainer = L.Trainer(max_epochs=args.epochs, default_root_dir=args.root, table=CALIBRATED, logger=False)
    model = DigitsClassifier()
    trainer.fit(model, datamodule=DigitsData())
    path = " -> ".join(record.end_state for record in trainer.history)
    print(f"fitted temperature: {model.temperature:.3f}")
    print(f"path: {path}")


if __name__ == "__main__":
    main()
