"""Issue 31, item 4: the git hook's publisher and file names. A name holding a newline desynchronised the
newline-separated ``git cat-file --batch`` (contents attributed to the wrong paths, or lost), and one name that
is not UTF-8 made the whole commit's event fail to encode (nothing of the commit reached the index). Real git
repositories; the last test goes through the installed hooks, real NATS, the index worker and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ctxpress_core.wire.v1 import IndexEvent
from db.models import CodeChunk, Repository
from db.session import engine_for
from indexer import hook_publish
from tests.indexer.index_repo import git

NEWLINE_NAME = "odd\nname.py"
NOT_UTF8_NAME = os.fsdecode(b"caf\xe9.py")  # a Latin-1 name, as an old archive leaves it


def _repo(root: Path, files: dict[str, str]) -> tuple[str | None, str]:
    """A repository with a first commit, then ``files`` in a second one: (first, second) commit ids."""
    root.mkdir()
    git(root, "init", "-q")
    (root / "README.md").write_text("readme\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    first = git(root, "rev-parse", "HEAD").strip()
    for name, text in files.items():
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "second")
    return first, git(root, "rev-parse", "HEAD").strip()


def test_a_newline_in_a_file_name_does_not_shift_the_contents(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"a.py": "A = 1\n", NEWLINE_NAME: "ODD = 2\n", "z.py": "Z = 3\n"}
    first, second = _repo(tmp_path / "repo", files)
    monkeypatch.chdir(tmp_path / "repo")  # where the hook runs
    changes, blobs, unnamed = hook_publish.diff(first, second)
    hook_publish.attach_contents(changes, blobs, 1 << 20)
    # before the fix: the name's two lines were read as two objects, both "missing", and every file after it
    # got the header meant for the one before it (z.py: "missing", or another file's text)
    assert {c["path"]: c["text"] for c in changes} == files
    assert unnamed == 0


def test_a_name_that_is_not_utf8_leaves_out_that_file_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = _repo(tmp_path / "repo", {"ok.py": "OK = 1\n", NOT_UTF8_NAME: "LATIN = 1\n"})
    monkeypatch.chdir(tmp_path / "repo")
    changes, blobs, unnamed = hook_publish.diff(first, second)
    hook_publish.attach_contents(changes, blobs, 1 << 20)
    assert [(c["path"], c["text"]) for c in changes] == [("ok.py", "OK = 1\n")] and unnamed == 1
    # and the event encodes (before: UnicodeEncodeError, and the hook dropped the whole commit)
    event = {"repository": "r", "commit": second, "previous": first, "hook": "post-commit", "published_at": 0.0}
    (payload,) = hook_publish.split_messages(event, changes, 1 << 20)
    assert [c.path for c in IndexEvent.model_validate_json(payload).changes] == ["ok.py"]


@pytest.mark.services
async def test_a_commit_with_odd_names_reaches_the_index(appliance: Any, tmp_path: Path) -> None:
    name = f"odd-names-{uuid.uuid4().hex[:6]}"
    root = tmp_path / "repo"
    first_symbol, odd_symbol = f"plain_{uuid.uuid4().hex[:6]}", f"odd_{uuid.uuid4().hex[:6]}"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README.md").write_text("readme\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    installed = appliance.ctxpress("hooks", "install", str(root), "--name", name)
    assert installed.returncode == 0, installed.stderr
    (root / "plain.py").write_text(f"def {first_symbol}(value):\n    return value + 1\n")
    (root / NEWLINE_NAME).write_text(f"def {odd_symbol}(value):\n    return value + 2\n")
    (root / NOT_UTF8_NAME).write_text("def latin(value):\n    return value + 3\n")
    git(root, "add", "-A")
    committed = git(root, "commit", "-q", "-m", "odd names")
    assert "index not updated" not in committed, committed
    url = appliance.settings.effective_database_url()
    deadline = time.monotonic() + 30
    found: dict[str, str] = {}
    while time.monotonic() < deadline and len(found) < 2:
        with Session(engine_for(url)) as session:
            rows = session.execute(select(CodeChunk.symbol, CodeChunk.path).join(Repository)
                                   .where(Repository.name == name))
            found = {symbol: path for symbol, path in rows}
        await asyncio.sleep(0.2)
    assert found == {first_symbol: "plain.py", odd_symbol: NEWLINE_NAME}
