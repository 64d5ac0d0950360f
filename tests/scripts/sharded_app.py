"""A sharded (or DDP) fit on CPU for tests/test_sharded.py: `python sharded_app.py OUT CONFIG_JSON`.

The trainer starts the script again for the other ranks. Rank 0 writes `OUT/weights.pt` (the whole weights after
fit, and at on_train_start) and every rank `OUT/rank<R>.json` (steps, epochs, the parameter elements it holds, the
dtypes a training step saw). CONFIG keys: strategy (ddp | fsdp | model_parallel), devices, epochs, ckpt (resume
from), state_dict_type, sharding_strategy, device_mesh, precision, checkpointing (activation checkpointing of the
blocks), save_top_k, empty_init, clip (gradient_clip_val), sizes (ModelParallel's data and tensor parallel
sizes), kill_in_save (rank 1 kills itself inside that numbered sharded save), fsdp_precision (given as an
FSDPPrecision plugin instead of `precision`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import statemachine as L
from statemachine.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.calls = 0

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        return torch.relu(self.linear(x))


class ShardedModel(L.LightningModule):
    def __init__(self, parallelize: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(), Block())
        self.out = nn.Linear(16, 1)
        self.seen: dict[str, Any] = {}

    def configure_model(self) -> None:
        if self.hparams.parallelize and self.device_mesh is not None:
            from torch.distributed.fsdp import fully_shard

            self.seen["mesh"] = list(self.device_mesh.mesh_dim_names)
            for block in self.blocks:
                fully_shard(block, mesh=self.device_mesh["data_parallel"])

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.blocks(self.inp(x)))

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        self.seen.setdefault("gathered_dtype", str(self.out.weight.dtype))  # inside the step, before forward
        prediction = self(x)
        self.seen.setdefault("compute_dtype", str(prediction.dtype))
        loss = nn.functional.mse_loss(prediction.float(), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x).float(), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class Recorder(L.Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # cloned: on one rank the gathered tensors are the parameters themselves, which training then changes
        gathered = trainer.strategy.gathered_module_state_dict(pl_module)
        self.start_weights = {name: tensor.clone() for name, tensor in gathered.items()}
        self.start = (trainer.current_epoch, trainer.global_step)


def data() -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)


def strategy(config: dict[str, Any]) -> Any:
    kind = config["strategy"]
    if kind == "ddp":
        return DDPStrategy()
    if kind == "model_parallel":
        sizes = config.get("sizes", ["auto", "auto"])
        return ModelParallelStrategy(*sizes, save_distributed_checkpoint=config.get("state_dict_type") == "sharded")
    options = {key: config[key] for key in ("sharding_strategy", "device_mesh", "state_dict_type") if key in config}
    if "device_mesh" in options:
        options["device_mesh"] = tuple(options["device_mesh"])
    if config.get("checkpointing"):
        options["activation_checkpointing_policy"] = {Block}
    return FSDPStrategy(auto_wrap_policy={Block}, **options)


def kill_inside_save(number: int) -> None:
    """Rank 1 dies (SIGKILL) while it writes its shards in the `number`-th sharded save."""
    from torch.distributed.checkpoint import FileSystemWriter

    original = FileSystemWriter.write_data
    calls = {"count": 0}

    def write_data(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["count"] += 1
        if calls["count"] == number:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)

    # This rank's own writer, replaced in this process only: the kill lands inside DCP's real write.
    FileSystemWriter.write_data = write_data  # type: ignore[method-assign]


def main() -> None:
    out, config = Path(sys.argv[1]), json.loads(sys.argv[2])
    torch.manual_seed(0)
    recorder = Recorder()
    top_k = config.get("save_top_k", -1)
    checkpoints = L.callbacks.ModelCheckpoint(dirpath=out / "checkpoints", save_top_k=top_k, save_last=True)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=config.get("devices", 2),
        strategy=strategy(config),
        precision=None if "fsdp_precision" in config else config.get("precision", "32-true"),
        plugins=[L.plugins.FSDPPrecision(config["fsdp_precision"])] if "fsdp_precision" in config else None,
        max_epochs=config.get("epochs", 2),
        gradient_clip_val=config.get("clip"),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder, checkpoints],
        default_root_dir=out,
    )
    parallelize = config["strategy"] == "model_parallel"
    if config.get("empty_init"):
        with trainer.init_module(empty_init=True):
            model = ShardedModel(parallelize)
    else:
        model = ShardedModel(parallelize)
    born_on_meta = all(p.is_meta for p in model.parameters())
    if "kill_in_save" in config and trainer.global_rank == 1:
        kill_inside_save(config["kill_in_save"])
    trainer.fit(model, data(), data(), ckpt_path=config.get("ckpt"))
    weights = trainer.strategy.gathered_module_state_dict(model)
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    record = {
        "rank": trainer.global_rank,
        "global_step": trainer.global_step,
        "epoch": trainer.current_epoch,
        "start": recorder.start,
        "local_elements": local,
        "parameter_dtype": str(next(model.parameters()).dtype),
        "block_calls": [block.calls for block in model.blocks],
        "born_on_meta": born_on_meta,
        **model.seen,
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
    if trainer.is_global_zero:
        torch.save({"end": weights, "start": recorder.start_weights}, out / "weights.pt")


if __name__ == "__main__":
    main()
