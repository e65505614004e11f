"""git diff -U0 HEAD line ranges, against a real temporary repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from indexer.changes import changed_line_ranges, parse_unified_diff

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_changed_line_ranges_in_a_real_repo(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    f = tmp_path / "m.py"
    original = [f"line{i}\n" for i in range(1, 21)]
    f.write_text("".join(original))
    _git(tmp_path, "add", "m.py")
    _git(tmp_path, "commit", "-q", "-m", "init")
    assert changed_line_ranges(tmp_path, "m.py") == []
    lines = list(original)
    lines[2] = "changed3\n"  # line 3 modified
    lines[9:9] = ["new-a\n", "new-b\n"]  # two lines inserted after line 9
    del lines[17]  # one line deleted further down
    f.write_text("".join(lines))
    ranges = changed_line_ranges(tmp_path, f)
    assert ranges[0] == (2, 2)
    assert ranges[1] == (9, 10)
    assert len(ranges) == 3 and ranges[2][0] == ranges[2][1]


def test_untracked_or_outside_repo_is_empty(tmp_path: Path) -> None:
    assert changed_line_ranges(tmp_path, "nothing.py") == []


def test_parse_unified_diff_headers() -> None:
    diff = "@@ -3 +3 @@\n-a\n+b\n@@ -10,0 +11,2 @@\n+x\n+y\n@@ -20,2 +21,0 @@\n-p\n-q\n"
    assert parse_unified_diff(diff) == [(2, 2), (10, 11), (20, 20)]
