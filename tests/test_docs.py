"""The documentation site: its diagram page is generated from the table and lists every edge, the site builds
with `mkdocs build --strict`, the edges the pages name are the table's, and the state-history dump is where
docs/history.md says it is."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import statemachine as L
from statemachine.engine.diagram import View, views
from statemachine.engine.table import TABLE, MachineTable
from statemachine.tuner.table import TUNER_TABLE

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
HISTORY_PAGE = DOCS / "history.md"
KEY = re.compile(r"\w+: [\w.]+ -> [\w.]+(?: \[[^\]`]+\])?")


def _load_hooks() -> ModuleType:
    """docs/hooks.py, loaded by its path (docs/ is no package), without leaving bytecode in docs/."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module


hooks = _load_hooks()


def _blocks(markdown: str) -> list[list[str]]:
    """The lines of each ```text block (the edge listings), in page order."""
    return [block.splitlines() for block in re.findall(r"^```text\n(.*?)^```", markdown, re.S | re.M)]


def _parse(line: str) -> tuple[str, tuple[str, ...]]:
    key, _, callbacks = line.partition(" / ")
    return key, tuple(callbacks.split(", ")) if callbacks else ()


def _own_transitions(table: MachineTable, view: View) -> list[str]:
    if view.fn is None:
        return [t.key for t in table.transitions]
    own = {s.name for s in table.states if s.fn == view.fn}
    return [t.key for t in table.transitions if t.source in own or t.dest in own]


# ---- the generated diagrams page --------------------------------------------------------------------------


def test_the_edge_listing_covers_every_transition_key_of_the_table() -> None:
    page = hooks.diagram_page(TABLE)
    blocks = _blocks(page)
    assert len(blocks) == len(views(TABLE)), "one edge listing per diagram"
    overview = [_parse(line) for line in blocks[0]]
    assert [key for key, _ in overview] == [t.key for t in TABLE.transitions]  # every edge, in table order
    for key, callbacks in overview:
        assert callbacks == TABLE.by_key[key].callbacks, f"{key}: listed with the wrong callbacks"
    for view, block in zip(views(TABLE), blocks, strict=True):
        assert [_parse(line)[0] for line in block] == _own_transitions(TABLE, view), view.name
        assert f"]({hooks.SVG_DIR}/{view.name}.svg)" in page, f"the page does not show {view.name}.svg"


def test_the_page_names_each_running_states_handler_and_its_file() -> None:
    page = hooks.diagram_page(TABLE)
    for state in TABLE.states:
        if state.resting:
            continue
        path = TABLE.handlers[state.handler or ""]
        module, _, function = path.partition(":")
        file = module.replace(".", "/") + ".py"
        assert (REPO / file).is_file(), file
        row = f"| `{state.name}` | `{state.handler}` | `{function}` | `{file}` |"
        assert row in page, f"no handler row for {state.name}: {row}"
    for guard in TABLE.guards:
        assert f"| `{guard.name}` |" in page


def test_the_tuner_listing_covers_every_edge_the_tuner_adds() -> None:
    (block,) = _blocks(hooks.tuner_page(TUNER_TABLE))
    added = [t for t in TUNER_TABLE.transitions if TABLE.by_key.get(t.key) != t]
    assert [_parse(line) for line in block] == [(t.key, t.callbacks) for t in added]
    assert added and all(t.key in TUNER_TABLE.by_key for t in added)


def test_the_edges_the_pages_name_are_the_tables() -> None:
    known = set(TABLE.by_key) | set(TUNER_TABLE.by_key)
    for page in sorted(DOCS.glob("*.md")):
        prose = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for span in re.findall(r"`([^`\n]+)`", prose):
            for key in KEY.findall(span):
                if key.startswith("trigger: source -> dest"):
                    continue  # the format itself
                assert key in known, f"{page.name} names {key!r}, which is no transition of the table"


# ---- the build --------------------------------------------------------------------------------------------


def test_the_site_builds_strict_with_the_diagrams_rendered_from_the_table(tmp_path: Path) -> None:
    site = tmp_path / "site"
    before = sorted(p.relative_to(DOCS) for p in DOCS.rglob("*") if "__pycache__" not in p.parts)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)]
    done = subprocess.run(build, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    for view in views(TABLE):
        svg = (site / hooks.SVG_DIR / f"{view.name}.svg").read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and f"table {TABLE.digest}" in svg, view.name
    assert f"table {TUNER_TABLE.digest}" in (site / hooks.SVG_DIR / f"{hooks.TUNER_SVG}.svg").read_text()
    diagrams = (site / "diagrams" / "index.html").read_text(encoding="utf-8")
    for t in TABLE.transitions:
        assert html.escape(hooks.edge_line(t), quote=False) in diagrams, f"the built page lacks {t.key}"
    assert not (site / "hooks.py").exists(), "the build hook is published as a page asset"
    # Nothing generated is written into docs/.
    after = sorted(p.relative_to(DOCS) for p in DOCS.rglob("*") if "__pycache__" not in p.parts)
    assert after == before
    assert all(p.suffix in {".md", ".py"} for p in after if p.is_file()), after


# ---- where the state history is dumped (described once, in docs/history.md) -------------------------------


class _Fails(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        raise RuntimeError("boom")

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _failing_fit(root: Path, **flags: Any) -> L.Trainer:
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = L.Trainer(
        default_root_dir=str(root),
        max_epochs=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        **flags,
    )
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(_Fails(), loader)
    return trainer


def test_history_page_says_where_the_dump_goes_and_no_other_page_repeats_it() -> None:
    page = HISTORY_PAGE.read_text(encoding="utf-8")
    section = re.search(r"^## Where the dump goes\n(.*?)(?=^## )", page, re.S | re.M)
    assert section is not None
    for fact in (
        "`lightning_logs/version_N/`",
        "`default_root_dir`",
        "`state-history-SEQ.json`",
        "`state-history-rankR-SEQ.json`",
        "`trainer.history_dump_path`",
        "Ctrl-C",
        "SIGTERM",
    ):
        assert fact in section.group(1), f"docs/history.md does not say {fact}"
    others = [REPO / "README.md", *(p for p in DOCS.glob("*.md") if p != HISTORY_PAGE)]
    for other in others:
        assert "state-history-" not in other.read_text(encoding="utf-8"), f"{other.name} restates the dump name"


def test_the_dump_is_in_the_first_loggers_log_dir(tmp_path: Path) -> None:
    trainer = _failing_fit(tmp_path)
    record = trainer.history[-1]
    assert (record.trigger, record.dest) == ("interrupt", "interrupted")
    expected = tmp_path / "lightning_logs" / "version_0" / f"state-history-{record.seq}.json"
    assert trainer.history_dump_path == str(expected) and expected.is_file()


def test_without_a_logger_the_dump_is_in_default_root_dir(tmp_path: Path) -> None:
    trainer = _failing_fit(tmp_path, logger=False)
    expected = tmp_path / f"state-history-{trainer.history[-1].seq}.json"
    assert trainer.history_dump_path == str(expected) and expected.is_file()
