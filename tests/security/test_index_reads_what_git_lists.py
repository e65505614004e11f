"""Issue 43, item 4: indexing reads only files that git lists, by the path git names them.

Two ways around it, both inside the repository, both reproduced on the code before the fix:
- a folder swapped for a symlink to an ignored folder of the same repository (``lib -> private``, ``private/`` in
  .gitignore): git's index still lists ``lib/util.py``, which was read as ``private/util.py`` (the round-2 check only
  refused symlinks leading out of the repository);
- a file taken out of git and ignored (``git rm --cached``, then .gitignore) but left on disk: ``ctxpress index
  --changed`` saw it in the diff since the last indexed commit and read its new, private content.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import CodeChunk, Repository
from db.session import engine_for
from indexer.pipeline import Indexer
from indexer.walk import outside
from serving.triton_client import TritonEmbedder
from tests.indexer.index_repo import git, walk


def _repo(root: Path) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "util.py").write_text("def shared_helper():\n    return 1\n")
    (root / "ok.py").write_text("def plain_function():\n    return 2\n")
    (root / ".gitignore").write_text("private/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return root


def _link_to_ignored_folder(root: Path, secret: str) -> None:
    (root / "private").mkdir()
    (root / "private" / "util.py").write_text(f"def {secret}():\n    return 'the key'\n")
    shutil.rmtree(root / "lib")
    (root / "lib").symlink_to("private", target_is_directory=True)


def test_a_symlink_to_an_ignored_folder_of_the_repository_is_not_read(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    secret = f"private_{uuid.uuid4().hex[:6]}"
    _link_to_ignored_folder(root, secret)
    assert outside(root, "lib/util.py") and not outside(root, "ok.py")
    files, skipped = walk(root)
    assert not any(secret in f.text for f in files)  # before the fix: lib/util.py held it
    assert {f.path for f in files} == {"ok.py"}
    assert any(s.path == "lib/util.py" and "symlink" in s.reason for s in skipped), skipped


def _symbols(url: str, repo: str) -> set[str]:
    with Session(engine_for(url)) as session:
        return set(session.scalars(select(CodeChunk.symbol).join(Repository).where(Repository.name == repo)))


@pytest.mark.services
def test_index_changed_reads_no_file_git_stopped_listing(appliance: Any, embedder: TritonEmbedder,
                                                         tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    indexer = Indexer(url, embedder)
    name = f"git-lists-{uuid.uuid4().hex[:6]}"
    root = _repo(tmp_path / "repo")
    (root / "settings_local.py").write_text("def committed_default():\n    return None\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "local settings")
    indexer.index_repository(root, name)
    assert _symbols(url, name) == {"shared_helper", "plain_function", "committed_default"}
    git(root, "rm", "-q", "--cached", "settings_local.py")
    (root / ".gitignore").write_text("private/\nsettings_local.py\n")
    git(root, "commit", "-q", "-am", "keep local settings out of git")
    secret = f"private_{uuid.uuid4().hex[:6]}"
    (root / "settings_local.py").write_text(f"def {secret}():\n    return 'the key'\n")
    indexer.index_changed(root, name)
    # before the fix: {secret, ...}: the ignored file's new content indexed
    assert _symbols(url, name) == {"shared_helper", "plain_function"}


@pytest.mark.services
def test_index_changed_reads_nothing_through_a_symlink_to_an_ignored_folder(appliance: Any,
                                                                            embedder: TritonEmbedder,
                                                                            tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    indexer = Indexer(url, embedder)
    name = f"git-lists-link-{uuid.uuid4().hex[:6]}"
    root = _repo(tmp_path / "repo")
    indexer.index_repository(root, name)
    secret = f"private_{uuid.uuid4().hex[:6]}"
    _link_to_ignored_folder(root, secret)
    (root / "ok.py").write_text("def plain_function():\n    return 3\n")
    indexer.index_changed(root, name)
    assert _symbols(url, name) == {"plain_function"}  # before the fix: {secret, "plain_function"}
