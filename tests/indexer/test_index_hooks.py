"""Hook installation and the hook's behaviour when NATS is unreachable (no services needed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from indexer import hooks
from indexer.hook_publish import diff
from tests.indexer.index_repo import git, make_repo


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when we return: nothing listens there


def test_install_chains_an_existing_hook_and_uninstall_restores_it(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    hook_dir = root / ".git" / "hooks"
    mine = hook_dir / "post-commit"
    mine.write_text(f"#!/bin/sh\necho \"$0 ran\" >> {tmp_path / 'ran.txt'}\nexit 3\n")
    mine.chmod(0o755)
    report = hooks.install(root, "repo", f"nats://127.0.0.1:{_closed_port()}")
    assert report.chained == ["post-commit"] and set(report.installed) == set(hooks.HOOKS)
    assert hooks.is_ours(mine) and (hook_dir / "post-commit.ctxpress-chained").exists()
    assert hooks.install(root, "repo", "nats://127.0.0.1:1").chained == []  # re-install: idempotent

    (root / "shop" / "extra.py").write_text("def extra():\n    return 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "extra")  # a post-commit exit status never fails the commit
    assert "ran" in (tmp_path / "ran.txt").read_text()  # the previous hook still runs

    removed = hooks.uninstall(root)
    assert set(removed.removed) == set(hooks.HOOKS) and removed.restored == ["post-commit"]
    assert "exit 3" in mine.read_text() and not (hook_dir / "post-commit.ctxpress-chained").exists()
    assert not (hook_dir / "post-merge").exists()


def test_hook_with_nats_unreachable_says_so_in_one_line_and_the_commit_succeeds(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    hooks.install(root, "repo", f"nats://127.0.0.1:{_closed_port()}")
    (root / "shop" / "late.py").write_text("def late():\n    return 2\n")
    git(root, "add", "-A")
    started = time.perf_counter()
    proc = subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q",
                           "-m", "late"], capture_output=True, text=True, env={**os.environ}, check=False)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ctxpress: index not updated"), proc.stderr
    assert elapsed < 2.0
    assert "late" in git(root, "log", "--oneline", "-1")


def test_publisher_reports_renames_and_deletes(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    git(root, "mv", "shop/shipping.py", "shop/delivery.py")
    git(root, "rm", "-q", "web/format.ts")
    git(root, "commit", "-q", "-m", "move")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        out = diff(git(root, "rev-parse", "HEAD~1").strip(), git(root, "rev-parse", "HEAD").strip())[0]
    finally:
        os.chdir(cwd)
    assert {"path": "shop/delivery.py", "status": "R", "old_path": "shop/shipping.py"} in out
    assert {"path": "web/format.ts", "status": "D", "old_path": None} in out


def test_publisher_runs_without_site_packages(tmp_path: Path) -> None:
    # The hook runs `python -I -S`: the publisher may import nothing outside the standard library.
    proc = subprocess.run([sys.executable, "-I", "-S", str(hooks.PUBLISHER), "--help"], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
