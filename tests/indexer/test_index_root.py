"""What `ctxpress index PATH` indexes: a work tree, or a folder no work tree owns (a venv package)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from indexer.walk import index_root, list_paths


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_an_ignored_folder_inside_a_work_tree_is_indexed_on_its_own(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text(".venv/\n")
    pkg = tmp_path / ".venv" / "lib" / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "main.py").write_text("z = 3\n")
    assert index_root(pkg) == pkg.resolve()
    assert list_paths(pkg.resolve()) == ["a.py", "sub/b.py"]
    assert index_root(tmp_path) == tmp_path.resolve()
    assert "main.py" in list_paths(tmp_path.resolve())


def test_a_folder_outside_git_is_its_own_root(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    assert index_root(tmp_path) == tmp_path.resolve()
    assert list_paths(tmp_path.resolve()) == ["m.py"]
