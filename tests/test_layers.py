"""The layers of the project, as pyproject.toml's import-linter contracts state them, hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


PACKAGES = ("benchmarks", "build_engines", "context", "ctxpress", "ctxpress_core", "db", "indexer", "serving", "syntax",
            "workers", "tests")


def test_every_import_of_a_project_module_names_one_that_exists() -> None:
    """Imports inside functions too, which neither importing the modules nor the contracts execute."""
    import ast
    import importlib.util

    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    if name.split(".")[0] in PACKAGES and importlib.util.find_spec(name) is None:
                        missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert missing == []
