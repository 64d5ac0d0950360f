"""pytorch-forecasting's models on a generated panel, as its tutorials drive them: a `lightning.pytorch.Trainer`
with EarlyStopping, LearningRateMonitor and a TensorBoardLogger, the learning-rate finder, the best checkpoint
reloaded, and the library's own `predict` (which runs a Trainer of its own). `python forecasting_fit.py WORK_DIR
[--real-lightning]` prints one JSON line; with `--real-lightning` the alias stays off."""

# ruff: noqa: E402  (the alias goes on before the library is imported)
from __future__ import annotations

import json
import os
import sys

REAL = "--real-lightning" in sys.argv
if not REAL:
    import statemachine.as_lightning  # noqa: F401  (before pytorch_forecasting, which imports lightning.pytorch)

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.tuner import Tuner
from pytorch_forecasting import Baseline, DeepAR, TemporalFusionTransformer, TimeSeriesDataSet
from pytorch_forecasting.data import GroupNormalizer, NaNLabelEncoder
from pytorch_forecasting.metrics import MAE, NormalDistributionLoss, QuantileLoss

work = sys.argv[1]
pl.seed_everything(0)
frames = []
for group in range(4):
    t = np.arange(80)
    values = np.sin(t / 6 + group) + 0.05 * group * t + 2.0
    frames.append(pd.DataFrame({"time_idx": t, "group": str(group), "value": values, "x": np.cos(t / 5)}))
data = pd.concat(frames, ignore_index=True).astype({"value": np.float32, "x": np.float32})
history = data[data.time_idx <= 60]
dataset = TimeSeriesDataSet(
    history,
    time_idx="time_idx",
    target="value",
    group_ids=["group"],
    max_encoder_length=12,
    max_prediction_length=4,
    static_categoricals=["group"],
    time_varying_known_reals=["time_idx", "x"],
    time_varying_unknown_reals=["value"],
    target_normalizer=GroupNormalizer(groups=["group"]),
)
train_loader = dataset.to_dataloader(train=True, batch_size=16, num_workers=0)
val_loader = TimeSeriesDataSet.from_dataset(dataset, data, predict=True, stop_randomization=True).to_dataloader(
    train=False, batch_size=16, num_workers=0
)
report: dict[str, object] = {}
baseline = Baseline().predict(val_loader, return_y=True)
report["baseline_mae"] = round(float(MAE()(baseline.output, baseline.y)), 5)

tft = TemporalFusionTransformer.from_dataset(
    dataset,
    learning_rate=0.03,
    hidden_size=8,
    attention_head_size=1,
    dropout=0.1,
    hidden_continuous_size=4,
    loss=QuantileLoss(),
    log_interval=2,
    reduce_on_plateau_patience=4,
)
# Under Lightning 2.6.6 with torch 2.13 the finder's restore fails (its checkpoint holds the dataset's encoders,
# which weights_only=True refuses). Ours restores the weights and the random state: the fit after it is unchanged.
if not REAL:
    before = {k: v.clone() for k, v in tft.state_dict().items()}
    finder = Tuner(pl.Trainer(accelerator="cpu", default_root_dir=work, enable_progress_bar=False, logger=False))
    found = finder.lr_find(
        tft, train_dataloaders=train_loader, val_dataloaders=val_loader, num_training=20, update_attr=False
    )
    report["lr_find"] = {
        "points": len(found.results["lr"]),
        "suggested": found.suggestion() is not None,
        "restored": all(torch.equal(before[k], v) for k, v in tft.state_dict().items()),
    }
trainer = pl.Trainer(
    max_epochs=2,
    accelerator="cpu",
    gradient_clip_val=0.1,
    limit_train_batches=6,
    default_root_dir=work,
    callbacks=[EarlyStopping(monitor="val_loss", patience=3), LearningRateMonitor()],
    logger=TensorBoardLogger(work),
    enable_progress_bar=False,
)
trainer.fit(tft, train_dataloaders=train_loader, val_dataloaders=val_loader)
best_path = trainer.checkpoint_callback.best_model_path
best = TemporalFusionTransformer.load_from_checkpoint(best_path)
predicted = best.predict(val_loader, return_y=True)
raw = best.predict(val_loader, mode="raw", return_x=True)
report["tft"] = {
    "trainer": f"{type(trainer).__module__}.{type(trainer).__name__}",
    "epochs": trainer.current_epoch,
    "steps": trainer.global_step,
    "best": os.path.relpath(best_path, work),
    "metrics": sorted(trainer.callback_metrics),
    "mae": round(float(MAE()(predicted.output, predicted.y)), 5),
    "raw": sorted(raw.output.keys()),
    "interpretation": sorted(best.interpret_output(raw.output, reduction="sum")),
}

deepar_data = TimeSeriesDataSet(
    history,
    time_idx="time_idx",
    target="value",
    group_ids=["group"],
    max_encoder_length=12,
    max_prediction_length=4,
    time_varying_unknown_reals=["value"],
    categorical_encoders={"group": NaNLabelEncoder().fit(data.group)},
    static_categoricals=["group"],
)
deepar_val = TimeSeriesDataSet.from_dataset(deepar_data, data, predict=True).to_dataloader(train=False, batch_size=16)
deepar = DeepAR.from_dataset(
    deepar_data, hidden_size=8, rnn_layers=1, loss=NormalDistributionLoss(), learning_rate=0.01
)
deepar_trainer = pl.Trainer(
    max_epochs=1,
    limit_train_batches=4,
    accelerator="cpu",
    default_root_dir=work,
    enable_progress_bar=False,
    logger=False,
    enable_checkpointing=False,
)
deepar_trainer.fit(deepar, deepar_data.to_dataloader(train=True, batch_size=16), deepar_val)
samples = deepar.predict(deepar_val, mode="prediction", n_samples=20)
report["deepar"] = {"steps": deepar_trainer.global_step, "shape": list(samples.shape)}
print(json.dumps(report))
