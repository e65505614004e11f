"""A long real third-party source file from the virtualenv (never the standard library)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CANDIDATES = ("sqlalchemy.orm.session", "sqlalchemy.sql.compiler", "pydantic.main", "numpy.ma.core")


def long_python_file(min_lines: int = 2000) -> tuple[str, str]:
    for module in CANDIDATES:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            continue
        text = Path(spec.origin).read_text(encoding="utf-8")
        if text.count("\n") >= min_lines:
            return spec.origin, text
    pytest.skip("no long third-party Python file installed")
