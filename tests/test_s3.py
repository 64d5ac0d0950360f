"""fsspec URLs for real: history dumps and checkpoints through an S3 endpoint (moto's server on loopback)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from conftest import Boom, TinyModel, make_loader, quiet_trainer
from moto import server as moto_server

from devices.checkpoint_io import load_checkpoint
from statemachine.engine.history import check_path, load_history


@pytest.fixture(scope="module")
def s3(tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **credentials).create_bucket(Bucket="runs")
    options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
    try:
        yield options
    finally:
        server.stop()


def test_history_dump_round_trips_through_s3(tmp_path: Any, s3: dict[str, Any]) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    with pytest.raises(Boom):
        trainer.fit(TinyModel(fail_in="training_step"), make_loader())
    path = trainer.dump_history("s3://runs/debug/history.json", storage_options=s3)
    dump = load_history(path, storage_options=s3)
    assert [r.trigger for r in dump.records] == ["fit", "begin", "train_ready", "epoch_boundary", "interrupt"]
    assert dump.records[-1].exception.type == "Boom"
    assert check_path(dump.records) == []


def test_checkpoint_saved_to_s3_restores_weights(tmp_path: Any, s3: dict[str, Any]) -> None:
    trainer = quiet_trainer(tmp_path, limit_train_batches=2)
    model = TinyModel()
    trainer.fit(model, make_loader())
    trainer.save_checkpoint("s3://runs/ckpts/model.ckpt", storage_options=s3)
    content = load_checkpoint("s3://runs/ckpts/model.ckpt", storage_options=s3)
    assert content["global_step"] == 2
    assert torch.equal(content["state_dict"]["layer.weight"], model.layer.weight)
