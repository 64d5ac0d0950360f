"""The README's example must run as printed (given loaders of 64 features and 10 classes); the README stays short,
and its `## How fit flows` names the table's real edges, in the order a plain fit takes them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from statemachine.engine.table import TABLE, TransitionSpec

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES = 250
# A backticked edge key: `trigger: source -> dest` or `trigger: source -> dest [guard]`.
KEY = re.compile(r"`(\w+: [\w.]+ -> [\w.]+(?: \[[^\]`]+\])?)`")
# The edges a plain fit takes, in order (one interrupt edge stands for every running state's).
FIT_PATH = (
    "fit: idle -> fitting.setup",
    "begin: fitting.setup -> fitting.sanity_checking [should_sanity_check]",
    "begin: fitting.setup -> fitting.train_setup [not should_sanity_check]",
    "sanity_check_done: fitting.sanity_checking -> fitting.train_setup",
    "train_ready: fitting.train_setup -> fitting.between_epochs [not fit_done]",
    "epoch_boundary: fitting.between_epochs -> fitting.training [not fit_done]",
    "val_check: fitting.training -> fitting.validating [val_batches_counted]",
    "validation_done: fitting.validating -> fitting.training",
    "epoch_done: fitting.training -> fitting.between_epochs",
    "epoch_boundary: fitting.between_epochs -> finished [fit_done]",
    "interrupt: fitting.training -> interrupted",
)


def test_readme_example_runs(tmp_path: Any, monkeypatch: Any) -> None:
    first = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert first is not None, "README.md has no ```python block"
    example = first.group(1)
    example = example.replace("max_epochs=10", "max_epochs=2")  # the same code, shorter
    monkeypatch.chdir(tmp_path)
    generator = torch.Generator().manual_seed(0)
    # 50 batches: as many as the default log_every_n_steps, so the example logs steps without a warning.
    x = torch.randn(1600, 64, generator=generator)
    y = torch.randint(0, 10, (1600,), generator=generator)
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    namespace: dict[str, Any] = {"train_loader": loader, "val_loader": loader}
    exec(compile(example, str(README), "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.finished and trainer.current_epoch == 2
    assert (tmp_path / "lightning_logs" / "version_0" / "checkpoints").is_dir()


def test_readme_is_at_most_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/ (at most {MAX_LINES})"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match is not None, f"README.md has no '## {title}' section"
    return match.group(1)


def _items(section: str) -> list[str]:
    """The numbered items of a section, each with its continuation lines joined."""
    return [" ".join(item.split()) for item in re.split(r"^\d+\. ", section, flags=re.M)[1:]]


def _handler_file(state: str) -> str | None:
    spec = TABLE.by_name[state]
    if spec.resting:
        return None
    module = TABLE.handlers[spec.handler or ""].partition(":")[0]
    return module.replace(".", "/") + ".py"


def _callback_files(t: TransitionSpec) -> set[str]:
    return {TABLE.callbacks[name].partition(":")[0].replace(".", "/") + ".py" for name in t.callbacks}


def test_how_fit_flows_names_real_edges_in_the_order_fit_takes_them() -> None:
    section = _section("How fit flows")
    named = KEY.findall(section)
    assert named, "'## How fit flows' names no edge as `trigger: source -> dest [guard]`"
    unknown = [key for key in named if key not in TABLE.by_key]
    assert not unknown, f"not transitions of the table: {unknown}"
    missing = [key for key in FIT_PATH if key not in named]
    assert not missing, f"'## How fit flows' leaves out {missing}"
    first = [named.index(key) for key in FIT_PATH]
    assert first == sorted(first), "'## How fit flows' names the fit's edges out of order"
    # A state or a guard named on its own (`fitting.setup`, `[fit_done]`) is the table's too.
    rest = KEY.sub("", section)
    states = [name for name in re.findall(r"`(\w+\.\w+)`", rest) if not name.endswith(".py")]
    assert states and set(states) <= set(TABLE.by_name), f"not states of the table: {set(states) - set(TABLE.by_name)}"
    guards = re.findall(r"`\[(?:not )?(\w+)\]`", rest)
    assert set(guards) <= set(TABLE.guard_specs), f"not guards of the table: {set(guards) - set(TABLE.guard_specs)}"


def test_each_how_fit_flows_item_names_its_handler_guard_and_callbacks_files() -> None:
    items = _items(_section("How fit flows"))
    assert len(items) >= 9
    for item in items:
        keys = KEY.findall(item)
        assert keys, f"an item names no edge: {item!r}"
        for key in keys:
            t = TABLE.by_key[key]
            handler = _handler_file(t.dest)
            if handler is not None:
                assert f"`{handler}`" in item, f"{key}: the item does not name {handler}, which runs in {t.dest}"
            for name in t.callbacks:
                assert re.search(rf"\b{name}\b", item), f"{key}: the item leaves out its callback {name}"
            for path in _callback_files(t):
                assert f"`{path}`" in item, f"{key}: the item does not name {path}, where its callbacks live"
        for path in re.findall(r"`([\w/]+\.py)`", item):
            assert (REPO / path).is_file(), f"{path} does not exist"
    interrupt = next(item for item in items if "`interrupt: " in item)
    assert "any running state" in interrupt


def test_readme_links_the_docs_and_the_history_dump_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make docs" in text and "(docs/index.md)" in text
    assert "(docs/history.md#where-the-dump-goes)" in text
    for target in re.findall(r"\]\(((?:docs|diagrams|examples|statemachine)/[^)#]*)", text):
        assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"
