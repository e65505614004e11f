"""FIM prompts cut from third-party code installed in the venv (never the standard library)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from serving.fim import fim_prompt


def _source(module: str) -> list[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).read_text(encoding="utf-8").splitlines(keepends=True)


def fim_prompts() -> list[str]:
    out = []
    for module, line in (("sqlalchemy.orm.session", 1520), ("pydantic.fields", 700), ("grpc._channel", 400)):
        lines = _source(module)
        body = lines[line]
        cut = len(body) - len(body.lstrip()) + 4
        prefix = "".join(lines[line - 40:line]) + body[:cut]
        out.append(fim_prompt(prefix, body[cut:] + "".join(lines[line + 1:line + 6])))
    return out
