"""`TensorBoardLogger(log_graph=True)` records the model graph when a run starts, traced on the module's
`example_input_array`; other loggers ignore graphs."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from statemachine.loggers import CSVLogger, TensorBoardLogger

# TensorBoard traces the graph with torch.jit.trace, which this torch deprecates (its warning, not ours).
TRACE_DEPRECATED = pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")


class WithExample(TinyModel):
    def __init__(self) -> None:
        super().__init__()
        self.example_input_array = torch.zeros(3, 4)


def _graph_nodes(log_dir: str) -> list[str]:
    """The names of the ops in the graph written to `log_dir`; empty when no graph was written."""
    accumulator = EventAccumulator(log_dir)
    accumulator.Reload()
    if not accumulator.Tags()["graph"]:
        return []
    return [node.op for node in accumulator.Graph().node]


@TRACE_DEPRECATED
def test_fit_logs_the_graph_traced_on_example_input_array(tmp_path: Any) -> None:
    tensorboard = TensorBoardLogger(tmp_path, log_graph=True)
    csv = CSVLogger(tmp_path, name="csv")
    trainer = quiet_trainer(
        tmp_path, logger=[tensorboard, csv], limit_train_batches=2, limit_val_batches=0, log_every_n_steps=1
    )
    trainer.fit(WithExample(), make_loader())
    nodes = _graph_nodes(tensorboard.log_dir)
    assert any("linear" in op for op in nodes), nodes
    assert set(os.listdir(csv.log_dir)) <= {"hparams.yaml", "metrics.csv"}  # CSV ignores the graph


@TRACE_DEPRECATED
def test_an_explicit_input_array_wins_and_a_tuple_gives_forward_its_arguments(tmp_path: Any) -> None:
    class TwoInputs(TinyModel):
        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return self.layer(x) * scale

    logger = TensorBoardLogger(tmp_path, log_graph=True)
    logger.log_graph(TwoInputs(), (torch.zeros(2, 4), torch.ones(1)))
    logger.finalize("success")
    assert any("mul" in op for op in _graph_nodes(logger.log_dir))


def test_without_an_example_input_the_graph_is_skipped_with_a_warning(tmp_path: Any) -> None:
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    trainer = quiet_trainer(tmp_path, logger=logger, limit_train_batches=2, limit_val_batches=0, log_every_n_steps=1)
    with pytest.warns(UserWarning, match="graph is not logged: the model has no `example_input_array`"):
        trainer.fit(TinyModel(), make_loader())
    assert _graph_nodes(logger.log_dir) == []


def test_an_input_that_cannot_be_traced_is_skipped_with_a_warning(tmp_path: Any) -> None:
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    with pytest.warns(UserWarning, match="its input is a dict, which cannot be traced"):
        logger.log_graph(TinyModel(), {"x": torch.zeros(2, 4)})


def test_log_graph_false_writes_no_graph(tmp_path: Any) -> None:
    logger = TensorBoardLogger(tmp_path)
    trainer = quiet_trainer(tmp_path, logger=logger, limit_train_batches=2, limit_val_batches=0, log_every_n_steps=1)
    trainer.fit(WithExample(), make_loader())
    assert _graph_nodes(logger.log_dir) == []
