from __future__ import annotations

import json
from pathlib import Path

import pytest


def _hf_checkpoint(path: Path, vocab: int) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "vocab_size": vocab}))
    (path / "model.safetensors").write_bytes(b"weights-" + path.name.encode())
    (path / "tokenizer.json").write_text("{}")
    return path


@pytest.fixture
def checkpoints(tmp_path: Path) -> tuple[Path, Path]:
    return _hf_checkpoint(tmp_path / "target", 151936), _hf_checkpoint(tmp_path / "draft", 151936)


@pytest.fixture
def code_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "served"
    (repo / "pkg").mkdir(parents=True)
    for i in range(12):
        body = "".join(f"def f{i}_{j}(x: int) -> int:\n    return x + {j}\n\n" for j in range(40))
        (repo / "pkg" / f"m{i}.py").write_text(body)
    (repo / "README.md").write_text("prose is not calibration data\n")
    (repo / "blob.bin").write_bytes(bytes(range(256)))
    return repo
