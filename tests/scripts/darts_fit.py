"""darts' torch models trained, checkpointed, reloaded and used to predict, as a darts user does, on a generated
series. `python darts_fit.py WORK_DIR [--real-lightning]` prints one JSON line of what the test compares; with
`--real-lightning` the alias stays off (how the reference numbers were observed under Lightning)."""

# ruff: noqa: E402  (the alias goes on before the library is imported)
from __future__ import annotations

import json
import os
import sys

if "--real-lightning" not in sys.argv:
    import statemachine.as_lightning  # noqa: F401  (before darts, which imports pytorch_lightning)

import numpy as np
from darts.models import BlockRNNModel, NBEATSModel
from darts.utils.timeseries_generation import linear_timeseries, sine_timeseries

work = sys.argv[1]
# Lightning 2.6 loads checkpoints with weights_only=True unless told otherwise; darts' hold its own objects.
load_options = {} if "--real-lightning" in sys.argv else {"weights_only": False}
series = (sine_timeseries(length=120, value_frequency=0.05) + linear_timeseries(length=120) * 0.1).astype(np.float32)
train, val = series[:90], series[90:]
report: dict[str, object] = {}
models = ((BlockRNNModel, {"model": "LSTM", "hidden_dim": 8}), (NBEATSModel, {"num_blocks": 1, "layer_widths": 16}))
for cls, options in models:
    name = cls.__name__
    model = cls(
        input_chunk_length=12,
        output_chunk_length=6,
        n_epochs=2,
        batch_size=16,
        random_state=0,
        save_checkpoints=True,
        model_name=name,
        work_dir=work,
        force_reset=True,
        pl_trainer_kwargs={"accelerator": "cpu", "enable_progress_bar": False},
        **options,
    )
    model.fit(train, val_series=val, verbose=False)
    fitted_by = model.trainer
    forecast = model.predict(6, series=train, verbose=False).values().ravel()
    last = cls.load_from_checkpoint(name, work_dir=work, best=False, **load_options)
    best = cls.load_from_checkpoint(name, work_dir=work, best=True, **load_options)
    model.save(os.path.join(work, f"{name}.pt"))
    saved = cls.load(os.path.join(work, f"{name}.pt"), **load_options)
    report[name] = {
        "trainer": f"{type(fitted_by).__module__}.{type(fitted_by).__name__}",
        "epochs": fitted_by.current_epoch,
        "steps": fitted_by.global_step,
        "forecast": [round(float(v), 5) for v in forecast],
        "checkpoints": sorted(os.listdir(os.path.join(work, name, "checkpoints"))),
        "last_same": bool(np.allclose(last.predict(6, series=train, verbose=False).values().ravel(), forecast)),
        "best_finite": bool(np.isfinite(best.predict(6, series=train, verbose=False).values()).all()),
        "saved_same": bool(np.allclose(saved.predict(6, series=train, verbose=False).values().ravel(), forecast)),
    }
print(json.dumps(report))
