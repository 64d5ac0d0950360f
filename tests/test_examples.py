"""The Lightning-style examples run as scripts, briefly, and do what they are for.

Each runs in its own interpreter, with the project's warnings as errors: an example must run cleanly.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import torch
from conftest import run_example


def epoch_values(metrics_csv: Path, name: str) -> list[float]:
    with open(metrics_csv) as file:
        return [float(row[name]) for row in csv.DictReader(file) if row.get(name)]


def load(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def test_autoencoder_learns_and_keeps_its_best_checkpoint(tmp_path: Path) -> None:
    output = run_example("autoencoder", "--max-epochs", "3", "--root", str(tmp_path))
    run_dir = tmp_path / "lightning_logs" / "version_0"
    val_losses = epoch_values(run_dir / "metrics.csv", "val_loss")
    assert len(val_losses) == 3 and val_losses[-1] < val_losses[0]
    best_epoch = val_losses.index(min(val_losses))
    checkpoints = list((run_dir / "checkpoints").glob("*.ckpt"))
    assert [path.name.split("-val_loss")[0] for path in checkpoints] == [f"autoencoder-epoch={best_epoch:02d}"]
    checkpoint = load(checkpoints[0])
    assert checkpoint["hyper_parameters"] == {"hidden_dim": 32, "code_dim": 8, "lr": 3e-3}
    assert checkpoint["datamodule_hyper_parameters"] == {"batch_size": 64}
    test_loss = float(output.split("test reconstruction loss:")[1].split()[0])
    assert test_loss < val_losses[0]


def test_gan_steps_both_optimizers_every_batch_and_logs_samples(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_example("gan", "--max-epochs", "2", "--root", str(tmp_path))
    run_dir = tmp_path / "lightning_logs" / "version_0"
    batches = 1797 // 64  # the digits, drop_last
    # in manual optimization every optimizer step counts: two per batch
    (checkpoint_path,) = (run_dir / "checkpoints").glob("*.ckpt")
    assert checkpoint_path.name == f"epoch=1-step={2 * 2 * batches}.ckpt"
    generator_state, discriminator_state = load(checkpoint_path)["optimizer_states"]
    for state in (generator_state, discriminator_state):
        assert {float(param["step"]) for param in state["state"].values()} == {2.0 * batches}
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    assert [event.step for event in events.Images("generated_images")] == [0, 1]
    assert {"g_loss", "d_loss"} <= set(events.Tags()["scalars"])
    assert events.Tags()["graph"]  # log_graph=True traced the generator on example_input_array


def test_finetuning_keeps_the_backbone_frozen_then_trains_it(tmp_path: Path) -> None:
    run_example(
        "finetuning", "--pretrain-epochs", "2", "--max-epochs", "4", "--unfreeze-at", "2", "--root", str(tmp_path)
    )
    pretrained = torch.load(tmp_path / "backbone.pt")
    run_dir = tmp_path / "finetune" / "version_0"
    checkpoints = {epoch: load(run_dir / "checkpoints" / f"epoch={epoch}.ckpt") for epoch in range(4)}

    def backbone(epoch: int) -> dict[str, torch.Tensor]:
        weights = checkpoints[epoch]["state_dict"]
        return {key.removeprefix("backbone."): value for key, value in weights.items() if key.startswith("backbone.")}

    def learning_rates(epoch: int) -> list[float]:
        return [group["lr"] for group in checkpoints[epoch]["optimizer_states"][0]["param_groups"]]

    for epoch in (0, 1):  # frozen: outside the optimizer and unchanged
        assert learning_rates(epoch) == [1e-2]
        assert all(torch.equal(backbone(epoch)[key], pretrained[key]) for key in pretrained)
    # unfrozen at epoch 2 with a tenth of the learning rate, which then doubles each epoch (the default lambda_func)
    assert learning_rates(2) == [1e-2, 1e-3]
    assert learning_rates(3) == [1e-2, 2e-3]
    assert not all(torch.equal(backbone(3)[key], pretrained[key]) for key in pretrained)
    val_acc = epoch_values(run_dir / "metrics.csv", "val_acc")
    assert len(val_acc) == 4 and val_acc[-1] > val_acc[0]


def test_image_classifier_cli_applies_its_config_and_predicts_with_the_best_checkpoint(tmp_path: Path) -> None:
    import yaml

    output = run_example(
        "image_classifier",
        *("--trainer.max_epochs", "2", "--trainer.limit_train_batches", "30", "--trainer.limit_val_batches", "5"),
        *("--trainer.limit_test_batches", "5", "--trainer.limit_predict_batches", "2"),
        *("--trainer.log_every_n_steps", "10", "--trainer.enable_progress_bar", "false"),
        *("--trainer.default_root_dir", str(tmp_path), "--data.data_dir", str(tmp_path / "data")),
        *("--model.learning_rate", "0.003", "--model.backbone.hidden_dim", "64", "--data.batch_size", "64"),
    )
    run_dir = tmp_path / "lightning_logs" / "version_0"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["seed_everything"] == 1234 and config["trainer"]["max_epochs"] == 2
    assert config["model"]["learning_rate"] == 0.003 and config["data"]["batch_size"] == 64
    assert config["model"]["backbone"]["init_args"]["hidden_dim"] == 64
    (checkpoint_path,) = (run_dir / "checkpoints").glob("*.ckpt")
    assert checkpoint_path.name == "epoch=1-step=60.ckpt"
    checkpoint = load(checkpoint_path)
    assert checkpoint["hyper_parameters"] == {"learning_rate": 0.003}  # the backbone is left out
    assert checkpoint["state_dict"]["backbone.l1.weight"].shape == (64, 784)
    assert float(output.split("test accuracy:")[1].split()[0]) > 0.8
    predicted = output.split("first predicted digits: [")[1].split("]")[0].split(", ")
    assert len(predicted) == 10 and all(digit in "0123456789" for digit in predicted)


def test_transformer_language_model_learns_the_demo_corpus(tmp_path: Path) -> None:
    output = run_example(
        "transformer",
        *("--max-epochs", "3", "--limit-train-batches", "12", "--ninp", "32", "--nhid", "64", "--nlayers", "1"),
        *("--root", str(tmp_path), "--data-dir", str(tmp_path / "data")),
    )
    assert (tmp_path / "data" / "wikitext-2-synthetic.txt").is_file()
    val_losses = epoch_values(tmp_path / "lightning_logs" / "version_0" / "metrics.csv", "val_loss")
    assert len(val_losses) == 3 and val_losses[0] > val_losses[1] > val_losses[2]
    guessing = float(output.split("guessing scores")[1].split(")")[0])
    test_loss = float(output.split("test loss:")[1].split()[0])
    assert test_loss < 0.8 * guessing


def test_dqn_learns_the_shortest_path_from_a_replay_buffer_fed_dataset(tmp_path: Path) -> None:
    output = run_example("dqn", "--max-epochs", "6", "--root", str(tmp_path))
    assert "greedy episode: 7 steps, reward 0.94" in output  # straight to the goal of the 8-cell corridor
    run_dir = tmp_path / "lightning_logs" / "version_0"
    epsilon = epoch_values(run_dir / "metrics.csv", "epsilon")
    # exploration fades out as it learns: from 1 at step 0 towards 0.01 at step 200
    assert epsilon == sorted(epsilon, reverse=True) and epsilon[0] > 0.9 and epsilon[-1] < 0.3
    (checkpoint_path,) = (run_dir / "checkpoints").glob("*.ckpt")
    assert checkpoint_path.name == "epoch=5-step=150.ckpt"  # 400 samples an epoch in batches of 16
