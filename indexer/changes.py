"""Recently modified lines of a file, from ``git diff -U0 HEAD``.

Not on the completion hot path (a git process costs milliseconds): the worker refreshes it on
save/commit events and passes the ranges to the assembler with the IDE's own edit ranges.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def parse_unified_diff(diff: str) -> list[tuple[int, int]]:
    """New-side line ranges (0-based, inclusive) of a ``-U0`` diff. A pure deletion marks the
    line where the removed text was (the line after which it stood)."""
    ranges: list[tuple[int, int]] = []
    for m in _HUNK.finditer(diff):
        start = int(m.group(1))
        count = int(m.group(2)) if m.group(2) is not None else 1
        if count == 0:
            line = max(0, start - 1)  # "+N,0": deleted after line N (1-based)
            ranges.append((line, line))
        else:
            ranges.append((start - 1, start - 1 + count - 1))
    return ranges


def changed_line_ranges(repo_root: str | Path, path: str | Path, timeout_s: float = 2.0) -> list[tuple[int, int]]:
    """Line ranges of ``path`` that differ from HEAD in the working tree, largest hunks last.

    An untracked file, a repository without commits or a git error gives ``[]``: "everything is
    new" carries no signal about which block the user is working on.
    """
    root = Path(repo_root)
    rel = Path(path)
    if rel.is_absolute():
        rel = rel.relative_to(root.resolve()) if rel.is_relative_to(root.resolve()) else rel.relative_to(root)
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "diff", "-U0", "--no-color", "--no-ext-diff", "HEAD", "--", str(rel)],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    return parse_unified_diff(proc.stdout)
