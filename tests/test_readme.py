"""The README's example must run as printed (given loaders of 64 features and 10 classes)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path: Any, monkeypatch: Any) -> None:
    example = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
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
