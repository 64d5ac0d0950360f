"""The hardware plane: batch transfer, precision flags, checkpoint files, strategy and connector."""

from __future__ import annotations

import os
from collections import OrderedDict, defaultdict, namedtuple
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from conftest import TinyModel, make_loader, quiet_trainer
from torch import nn

import devices
import statemachine as L
from devices import (
    CorruptCheckpointError,
    CPUAccelerator,
    CUDAAccelerator,
    Precision,
    SingleDeviceStrategy,
    StepClosure,
    connect,
    load_checkpoint,
    remove_checkpoint,
    resolve_precision,
    save_checkpoint,
)
from devices.checkpoint_io import exists
from devices.ddp import DDPStrategy
from devices.transfer import move_to_device

Pair = namedtuple("Pair", ["x", "y"])


@dataclass
class Batch:
    inputs: torch.Tensor
    meta: dict[str, Any]
    note: str = "keep"
    extra: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class FrozenBatch:
    inputs: torch.Tensor


class Movable:
    """Stands in for objects such as a tokenizer's BatchEncoding that move themselves."""

    def __init__(self) -> None:
        self.moved_to: torch.device | None = None

    def to(self, device: torch.device) -> Movable:
        self.moved_to = device
        return self


@pytest.fixture
def memfs() -> fsspec.AbstractFileSystem:
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]
    yield fs
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def _cpu_strategy() -> SingleDeviceStrategy:
    return SingleDeviceStrategy(torch.device("cpu"), CPUAccelerator(), precision_plugin=Precision())


# ---------------------------------------------------------------- batch transfer


def test_nested_batch_is_rebuilt_with_same_types_and_every_tensor_moved() -> None:
    # The meta device makes a move observable on a CPU-only host without allocating anything.
    target = torch.device("meta")
    default = defaultdict(list, {"d": torch.ones(1)})
    batch = {
        "plain": torch.zeros(2),
        "pair": Pair(torch.ones(1), [torch.ones(3), (torch.ones(1), "text")]),
        "ordered": OrderedDict(a=torch.ones(1)),
        "default": default,
        "data": Batch(torch.ones(2), {"m": torch.ones(1)}, extra=[torch.ones(1)]),
        "frozen": FrozenBatch(torch.ones(1)),
        "count": 3,
        "name": "sample",
    }
    moved = move_to_device(batch, target)

    assert moved["plain"].device == target
    assert type(moved["pair"]) is Pair
    assert moved["pair"].x.device == target
    assert moved["pair"].y[0].device == target
    assert type(moved["pair"].y[1]) is tuple and moved["pair"].y[1][0].device == target
    assert moved["pair"].y[1][1] == "text"
    assert type(moved["ordered"]) is OrderedDict and moved["ordered"]["a"].device == target
    assert type(moved["default"]) is defaultdict and moved["default"].default_factory is list
    assert moved["default"]["d"].device == target
    assert type(moved["data"]) is Batch
    assert moved["data"].inputs.device == target and moved["data"].meta["m"].device == target
    assert moved["data"].extra[0].device == target and moved["data"].note == "keep"
    assert type(moved["frozen"]) is FrozenBatch and moved["frozen"].inputs.device == target
    assert moved["count"] == 3 and moved["name"] == "sample"
    # The caller's batch is untouched.
    assert batch["plain"].device.type == "cpu"
    assert batch["data"].inputs.device.type == "cpu"
    assert batch["frozen"].inputs.device.type == "cpu"


def test_objects_with_a_to_method_move_themselves() -> None:
    item = Movable()
    moved = _cpu_strategy().batch_to_device({"enc": item})
    assert moved["enc"] is item
    assert item.moved_to == torch.device("cpu")


def test_batch_to_device_defaults_to_root_device_and_honours_explicit_device() -> None:
    strategy = _cpu_strategy()
    assert strategy.batch_to_device([torch.ones(1)])[0].device == torch.device("cpu")
    assert strategy.batch_to_device([torch.ones(1)], torch.device("meta"))[0].device.type == "meta"


def test_unrebuildable_container_names_its_type() -> None:
    class Odd(list):
        def __init__(self, a: int, b: int) -> None:
            super().__init__([a, b])

    with pytest.raises(TypeError, match="Odd"):
        move_to_device(Odd(1, 2), "cpu")


def test_optimizer_state_moves_but_plain_step_counter_stays_on_host() -> None:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    _cpu_strategy().optimizers_to_device([optimizer], torch.device("meta"))
    state = optimizer.state[model.weight]
    assert state["exp_avg"].device.type == "meta"
    assert state["exp_avg_sq"].device.type == "meta"
    assert state["step"].device.type == "cpu"


# ---------------------------------------------------------------- precision


@pytest.mark.parametrize("value", [None, "32-true", "32", 32])
def test_32_true_and_its_aliases_resolve(value: Any) -> None:
    plugin = resolve_precision(value)
    assert isinstance(plugin, Precision) and plugin.name == "32-true"


@pytest.mark.parametrize("value", ["fp8", 8, True, 32.0, "32-TRUE", [32], "transformer-engine"])
def test_unknown_precisions_list_allowed_values(value: Any) -> None:
    with pytest.raises(ValueError, match="use one of") as info:
        resolve_precision(value)
    assert repr(value) in str(info.value) and "'32-true'" in str(info.value)


def test_precision_plugin_runs_backward_and_step() -> None:
    plugin = Precision()
    model = nn.Linear(2, 1)
    assert plugin.convert_module(model) is model
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = model.weight.detach().clone()

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        with plugin.forward_context():
            loss = model(torch.ones(1, 2)).sum()
        plugin.backward(loss)
        return loss

    returned = plugin.optimizer_step(optimizer, StepClosure(closure, lambda: None, automatic=True))
    assert isinstance(returned, torch.Tensor)
    assert not torch.equal(before, model.weight)
    assert plugin.state_dict() == {}
    plugin.load_state_dict({})
    with pytest.raises(ValueError, match="scale"):
        plugin.load_state_dict({"scale": 1.0})


# ---------------------------------------------------------------- checkpoint I/O


def _checkpoint() -> dict[str, Any]:
    return {"epoch": 1, "global_step": 7, "state_dict": {"w": torch.arange(4.0)}, "nested": {"k": [1, 2]}}


def test_local_round_trip_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "last.ckpt"
    save_checkpoint(_checkpoint(), str(path))
    loaded = load_checkpoint(path)
    assert loaded["global_step"] == 7 and torch.equal(loaded["state_dict"]["w"], torch.arange(4.0))
    assert os.listdir(path.parent) == ["last.ckpt"]
    assert exists(str(path))
    remove_checkpoint(str(path))
    assert not exists(str(path))
    remove_checkpoint(str(path))  # already gone: not an error


def test_overwrite_replaces_whole_file(tmp_path: Path) -> None:
    path = str(tmp_path / "x.ckpt")
    save_checkpoint({"v": 1}, path)
    save_checkpoint({"v": 2}, path)
    assert load_checkpoint(path) == {"v": 2}


def test_memory_url_round_trip(memfs: fsspec.AbstractFileSystem) -> None:
    save_checkpoint(_checkpoint(), "memory://runs/ckpts/epoch=1.ckpt")
    assert memfs.ls("/runs/ckpts", detail=False) == ["/runs/ckpts/epoch=1.ckpt"]
    loaded = load_checkpoint("memory://runs/ckpts/epoch=1.ckpt", map_location="cpu")
    assert loaded["nested"] == {"k": [1, 2]}


@pytest.mark.parametrize("url", ["local", "memory"])
def test_failed_write_leaves_neither_final_nor_temporary_file(
    url: str, tmp_path: Path, memfs: fsspec.AbstractFileSystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = str(tmp_path) if url == "local" else "memory://crash"
    path = f"{directory}/model.ckpt"
    save_checkpoint({"v": "old"}, path)

    def half_save(obj: Any, stream: Any, *args: Any, **kwargs: Any) -> None:
        stream.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", half_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"v": "new"}, path)
    monkeypatch.undo()

    fs, fs_dir = fsspec.core.url_to_fs(directory)
    assert [os.path.basename(p) for p in fs.ls(fs_dir, detail=False)] == ["model.ckpt"]
    assert load_checkpoint(path) == {"v": "old"}


def test_failed_write_to_new_name_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def half_save(obj: Any, stream: Any, *args: Any, **kwargs: Any) -> None:
        stream.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", half_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint({"v": 1}, str(tmp_path / "new.ckpt"))
    assert os.listdir(tmp_path) == []


def test_directory_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="names a directory"):
        save_checkpoint({"v": 1}, f"{tmp_path}/")
    assert os.listdir(tmp_path) == []


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.ckpt")
    with pytest.raises(FileNotFoundError, match="nope.ckpt") as info:
        load_checkpoint(path)
    assert info.value.filename == path


@pytest.mark.parametrize("keep", [0.5, 0.1])
def test_truncated_file_is_corrupt_and_named(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "cut.ckpt"
    save_checkpoint(_checkpoint(), str(path))
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CorruptCheckpointError, match="truncated") as info:
        load_checkpoint(str(path))
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_text_file_is_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "notes.ckpt"
    path.write_text("epoch: 3\n")
    with pytest.raises(CorruptCheckpointError, match="not a PyTorch checkpoint") as info:
        load_checkpoint(str(path))
    assert str(path) in str(info.value)


def test_empty_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "empty.ckpt"
    path.write_bytes(b"")
    with pytest.raises(CorruptCheckpointError, match="empty"):
        load_checkpoint(str(path))


def test_plain_pickle_is_not_a_torch_checkpoint(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "foreign.pkl"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(CorruptCheckpointError, match="foreign.pkl"):
        load_checkpoint(str(path))


def test_non_dict_checkpoint_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "list.ckpt"
    torch.save([1, 2, 3], path)
    with pytest.raises(CorruptCheckpointError, match="holds a list") as info:
        load_checkpoint(str(path))
    assert str(path) in str(info.value)


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        load_checkpoint(str(tmp_path))


# ---------------------------------------------------------------- strategy


def test_single_device_strategy_layout_and_collectives() -> None:
    strategy = _cpu_strategy()
    assert strategy.root_device == torch.device("cpu")
    assert (strategy.world_size, strategy.global_rank, strategy.local_rank, strategy.node_rank) == (
        1,
        0,
        0,
        0,
    )
    assert strategy.is_global_zero and strategy.num_devices == 1
    strategy.barrier("x")
    obj = {"a": 1}
    assert strategy.broadcast(obj) is obj
    value = torch.tensor(3.0)
    assert strategy.reduce(value, reduce_op="sum") is value
    assert strategy.reduce(value, reduce_op=torch.distributed.ReduceOp.MAX) is value
    assert strategy.all_gather(value) is value
    assert strategy.reduce_boolean_decision(True) is True
    with pytest.raises(ValueError, match="'meen'"):
        strategy.reduce(value, reduce_op="meen")
    with pytest.raises(ValueError, match="src=1"):
        strategy.broadcast(obj, src=1)
    strategy.on_exception(RuntimeError("boom"))


def test_strategy_refuses_device_of_another_accelerator() -> None:
    with pytest.raises(ValueError, match="'cuda:0'"):
        SingleDeviceStrategy(torch.device("cuda", 0), CPUAccelerator(), precision_plugin=Precision())


class RecordingLinear(nn.Linear):
    """Records where it is sent, since a CPU-only host has no other device to bring it back from."""

    def __init__(self) -> None:
        super().__init__(2, 1)
        self.sent_to: list[torch.device] = []

    def to(self, *args: Any, **kwargs: Any) -> RecordingLinear:
        self.sent_to.append(torch.device(args[0]))
        return super().to(*args, **kwargs)


def test_setup_step_and_teardown_move_module_and_optimizer_state_to_cpu() -> None:
    strategy = _cpu_strategy()
    strategy.setup_environment()
    model = strategy.setup_module(RecordingLinear())
    assert model.sent_to == [torch.device("cpu")]
    optimizer = torch.optim.Adam(model.parameters())
    before = model.weight.detach().clone()

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(strategy.batch_to_device(torch.ones(1, 2))).sum()
        strategy.backward(loss)
        return loss

    strategy.optimizer_step(optimizer, closure)
    assert not torch.equal(before, model.weight)
    extra_state = Movable()
    optimizer.state[model.weight]["extra"] = extra_state

    strategy.teardown(model, [optimizer])
    assert model.sent_to[-1] == torch.device("cpu")
    assert extra_state.moved_to == torch.device("cpu")


def test_cuda_accelerator_sets_device_and_empties_cache_on_teardown(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set", device)))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    accelerator = CUDAAccelerator()
    accelerator.setup_device(torch.device("cuda", 1))
    accelerator.teardown()
    assert calls == [("set", torch.device("cuda", 1)), "empty"]
    with pytest.raises(ValueError, match="'cpu'"):
        accelerator.setup_device(torch.device("cpu"))


def test_strategy_checkpoint_delegation(tmp_path: Path) -> None:
    strategy = _cpu_strategy()
    path = str(tmp_path / "s.ckpt")
    strategy.save_checkpoint({"k": torch.ones(1)}, path)
    assert strategy.load_checkpoint(path)["k"].device.type == "cpu"
    strategy.remove_checkpoint(path)
    assert not exists(path)


# ---------------------------------------------------------------- connector


def test_connect_defaults_to_cpu_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 0)
    strategy = connect()
    assert isinstance(strategy.accelerator, CPUAccelerator)
    assert strategy.root_device == torch.device("cpu")
    assert strategy.precision.name == "32-true"
    for devices_flag in (1, "1", " 1 ", "auto"):
        assert connect("cpu", devices_flag).root_device == torch.device("cpu")


@pytest.mark.parametrize(
    ("accelerator", "devices_flag", "expected"),
    [("cuda", 1, "cuda:0"), ("gpu", [1], "cuda:1"), ("cuda", "0,", "cuda:0"), ("auto", "1", "cuda:0")],
)
def test_connect_picks_one_cuda_device(
    monkeypatch: pytest.MonkeyPatch, accelerator: str, devices_flag: Any, expected: str
) -> None:
    _fake_cuda(monkeypatch, 2)
    strategy = connect(accelerator, devices_flag)
    assert isinstance(strategy.accelerator, CUDAAccelerator)
    assert strategy.root_device == torch.device(expected)


@pytest.mark.parametrize(
    ("kwargs", "indices", "num_nodes"),
    [
        ({"devices": 2}, [0, 1], 1),
        ({"devices": -1}, [0, 1], 1),
        ({"devices": "auto"}, [0, 1], 1),
        ({"devices": [1, 0]}, [1, 0], 1),
        ({"devices": 1, "strategy": "ddp"}, [0], 1),
        ({"devices": 1, "num_nodes": 2}, [0], 2),
    ],
)
def test_connect_builds_ddp_for_several_cuda_devices(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], indices: list[int], num_nodes: int
) -> None:
    _fake_cuda(monkeypatch, 2)
    strategy = connect("cuda", **kwargs)
    assert isinstance(strategy, DDPStrategy)
    assert strategy.parallel_devices == [torch.device("cuda", i) for i in indices]
    assert strategy.world_size == len(indices) * num_nodes
    assert strategy.backend == "nccl"


@pytest.mark.parametrize(
    ("strategy_name", "start_method", "find_unused"),
    [
        ("ddp", "popen", False),
        ("ddp_spawn", "spawn", False),
        ("ddp_fork", "fork", False),
        ("ddp_notebook", "fork", False),
        ("ddp_find_unused_parameters_true", "popen", True),
        ("ddp_spawn_find_unused_parameters_false", "spawn", False),
    ],
)
def test_lightning_ddp_names_choose_the_launch_method(strategy_name: str, start_method: str, find_unused: bool) -> None:
    strategy = connect("cpu", devices=2, strategy=strategy_name)
    assert isinstance(strategy, DDPStrategy)
    assert (strategy.start_method, strategy.world_size, strategy.backend) == (start_method, 2, "gloo")
    assert strategy.ddp_kwargs.get("find_unused_parameters", False) is find_unused


def test_device_ids_number_the_cpu_processes_and_name_the_cuda_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    assert L.Trainer(accelerator="cpu", devices=3, logger=False).device_ids == [0, 1, 2]
    assert L.Trainer(accelerator="cpu", logger=False).device_ids == [0]
    _fake_cuda(monkeypatch, 2)
    assert L.Trainer(accelerator="cuda", devices=[1], logger=False).device_ids == [1]
    assert L.Trainer(accelerator="cuda", devices=[1, 0], logger=False).device_ids == [1, 0]


def test_several_cpu_processes_default_to_ddp_and_a_strategy_instance_keeps_its_timeout() -> None:
    assert isinstance(connect("cpu", devices=2), DDPStrategy)
    given = DDPStrategy(timeout=timedelta(seconds=42), find_unused_parameters=True)
    strategy = connect("cpu", devices=3, strategy=given, num_nodes=1)
    assert strategy is given and strategy.timeout == timedelta(seconds=42) and strategy.world_size == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ddp_comm_state": object()}, r"DDPStrategy\(ddp_comm_state=\.\.\.\) needs ddp_comm_hook="),
        ({"ddp_comm_wrapper": print}, r"DDPStrategy\(ddp_comm_wrapper=\.\.\.\) needs ddp_comm_hook="),
        ({"ddp_comm_hook": print, "model_averaging_period": 4}, r"post-local SGD .* is not supported"),
    ],
)
def test_ddp_strategy_refuses_communication_options_it_cannot_honour(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DDPStrategy(**options)


@pytest.mark.parametrize("name", ["accelerator", "parallel_devices", "precision"])
def test_ddp_strategy_refuses_what_the_trainers_flags_set(name: str) -> None:
    # connect() sets them from accelerator=, devices= and precision=: a value given here would be dropped
    with pytest.raises(ValueError, match=rf"DDPStrategy\({name}=\.\.\.\) is not supported"):
        DDPStrategy(**{name: object()})


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"strategy": "deepspeed"}, "strategy='deepspeed'"),
        ({"strategy": "xla_debug"}, "strategy='xla_debug'"),
        ({"strategy": "single_device", "devices": 2}, "strategy='single_device'"),
    ],
)
def test_connect_refuses_strategies_it_does_not_run(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError) as info:
        connect("cpu", **kwargs)
    assert needle in str(info.value)
    assert "use " in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"devices": 0}, "devices=0"),
        ({"devices": -2}, "devices=-2"),
        ({"devices": "two"}, "devices='two'"),
        ({"devices": [0]}, "devices=[0]"),
        ({"devices": True}, "devices=True"),
        ({"accelerator": "tpu-ish"}, "accelerator='tpu-ish'"),
        ({"strategy": "horovod"}, "strategy='horovod'"),
        ({"num_nodes": 0}, "num_nodes=0"),
        ({"precision": "16-mixd"}, "precision='16-mixd'"),
    ],
)
def test_connect_refuses_nonsense_and_lists_allowed_values(kwargs: dict[str, Any], needle: str) -> None:
    kwargs = {"accelerator": "cpu"} | kwargs
    with pytest.raises(ValueError) as info:
        connect(**kwargs)
    assert needle in str(info.value)
    assert " use " in str(info.value) or "supported:" in str(info.value)


def test_connect_refuses_cuda_devices_that_are_not_there(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 2)
    with pytest.raises(ValueError, match=r"CUDA device\(s\) \[3\]"):
        connect("cuda", [3])
    with pytest.raises(ValueError, match="more than once"):
        connect("cuda", [1, 1])
    with pytest.raises(ValueError, match="devices=0"):
        connect("cuda", 0)


def test_connect_refuses_cuda_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 0)
    with pytest.raises(ValueError, match="accelerator='gpu'.*CUDA is not available"):
        connect("gpu", 1)
    with pytest.raises(ValueError, match="not available"):
        connect(CUDAAccelerator(), 1)


def test_connect_refuses_mps_as_not_yet_supported() -> None:
    with pytest.raises(ValueError, match="accelerator='mps' is recognised but not supported yet"):
        connect("mps", 1)


def test_connect_reports_every_bad_flag_at_once() -> None:
    with pytest.raises(ValueError) as info:
        connect("cpu", devices=0, strategy="deepspeed", precision="bf15", num_nodes=0)
    message = str(info.value)
    for needle in ("devices=0", "strategy='deepspeed'", "precision='bf15'", "num_nodes=0"):
        assert needle in message


def test_connect_accepts_an_accelerator_instance_and_single_device_strategy() -> None:
    strategy = connect(CPUAccelerator(), devices=1, strategy="single_device", precision=32)
    assert strategy.root_device == torch.device("cpu")


def test_devices_does_not_import_upper_layers() -> None:
    source_dir = Path(devices.__file__).parent
    for source in source_dir.glob("*.py"):
        text = source.read_text()
        assert "import statemachine" not in text and "from statemachine" not in text, source
        assert "import stages" not in text and "from stages" not in text, source


def test_all_gather_keeps_every_container_a_batch_may_be(tmp_path: Path) -> None:
    """One process: tensors come back as they are, numbers as tensors, in the same containers (namedtuples and
    defaultdicts included, as a batch's transfer keeps them)."""

    class Gathering(TinyModel):
        def on_train_start(self) -> None:
            counts: defaultdict[str, list[Any]] = defaultdict(list, {"n": [2]})
            self.gathered = self.all_gather({"pair": Pair(torch.ones(2), 3), "counts": counts, "flag": True})

    model = Gathering()
    quiet_trainer(tmp_path, limit_train_batches=1).fit(model, make_loader())
    gathered = model.gathered
    assert type(gathered["pair"]) is Pair and torch.equal(gathered["pair"].x, torch.ones(2))
    assert torch.equal(gathered["pair"].y, torch.tensor(3))
    assert type(gathered["counts"]) is defaultdict and gathered["counts"].default_factory is list
    assert torch.equal(gathered["counts"]["n"][0], torch.tensor(2)) and gathered["flag"] is True


def test_a_single_device_strategy_built_alone_takes_the_trainers_accelerator_and_precision() -> None:
    strategy = L.strategies.SingleDeviceStrategy("cpu")  # Lightning's call form: the device alone
    trainer = L.Trainer(strategy=strategy, accelerator="cpu", precision="bf16-mixed", logger=False)
    assert trainer.strategy is strategy and trainer.num_devices == 1
    assert strategy.root_device == torch.device("cpu") and strategy.accelerator.name == "cpu"
    assert strategy.precision.name == "bf16-mixed"
    with pytest.raises(ValueError, match="runs one process, but devices=2"):
        L.Trainer(strategy=L.strategies.SingleDeviceStrategy("cpu"), accelerator="cpu", devices=2, logger=False)
    with pytest.raises(ValueError, match="device 'cuda:0' does not belong to accelerator 'cpu'"):
        L.Trainer(strategy=L.strategies.SingleDeviceStrategy("cuda:0"), accelerator="cpu", logger=False)


def test_removing_a_link_to_a_checkpoint_folder_removes_the_link_only(tmp_path: Path) -> None:
    folder = tmp_path / "epoch=1-step=8.ckpt"
    folder.mkdir()
    (folder / "meta.pt").write_bytes(b"kept")
    link = tmp_path / "last.ckpt"
    link.symlink_to(folder.name)
    devices.remove_checkpoint(link)
    assert not link.is_symlink() and (folder / "meta.pt").read_bytes() == b"kept"
    devices.remove_checkpoint(folder)  # a folder of shards goes whole
    assert not folder.exists()
