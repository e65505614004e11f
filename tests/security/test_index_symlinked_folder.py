"""Issue 31, item 5: indexing never reads through a symlinked folder out of the repository. Only the last
component was checked (``is_symlink``): a folder replaced by a symlink to somewhere else (``lib -> ../outside``,
as a cloned repository can hold) made ``lib/leak.py`` a file outside the repository that git still lists, and
its content went into the index, where colleagues' prompts retrieve it. A real repository, the real indexer,
embedder and PostgreSQL."""

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
from tests.indexer.index_repo import git

pytestmark = pytest.mark.services


def _symbols(url: str, repo: str) -> dict[str, str]:
    with Session(engine_for(url)) as session:
        rows = session.execute(select(CodeChunk.symbol, CodeChunk.path).join(Repository)
                               .where(Repository.name == repo))
        return {symbol: path for symbol, path in rows}


def _repo_with_a_folder_swapped_for_a_symlink(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose committed ``lib/leak.py`` is, in the working tree, ``../outside/leak.py``."""
    secret = f"outside_only_{uuid.uuid4().hex[:6]}"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "leak.py").write_text(f"def {secret}():\n    return 'not the repository'\n")
    root = tmp_path / "repo"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "leak.py").write_text("def inside_lib():\n    return 1\n")
    (root / "ok.py").write_text("def plain_function():\n    return 2\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return root, secret


def _swap(root: Path) -> None:
    shutil.rmtree(root / "lib")
    (root / "lib").symlink_to("../outside", target_is_directory=True)


def test_a_path_through_a_symlinked_folder_is_outside(tmp_path: Path) -> None:
    root, _ = _repo_with_a_folder_swapped_for_a_symlink(tmp_path)
    assert not outside(root, "lib/leak.py")
    _swap(root)
    assert outside(root, "lib/leak.py") and not outside(root, "ok.py")


def test_index_changed_reads_nothing_through_a_symlinked_folder(appliance: Any, embedder: TritonEmbedder,
                                                                tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    indexer = Indexer(url, embedder)
    name = f"symlinked-{uuid.uuid4().hex[:6]}"
    root, secret = _repo_with_a_folder_swapped_for_a_symlink(tmp_path)
    indexer.index_repository(root, name)
    assert set(_symbols(url, name)) == {"inside_lib", "plain_function"}
    _swap(root)
    (root / "ok.py").write_text("def plain_function():\n    return 3\n")  # a change of its own, indexed
    summary = indexer.index_changed(root, name)
    # before the fix: {secret: "lib/leak.py", ...}, the outside file indexed under the repository's path
    assert secret not in _symbols(url, name)
    assert set(_symbols(url, name)) == {"plain_function"}  # lib/leak.py is no file of the repository any more
    assert any(s.path == "lib/leak.py" and "outside" in s.reason for s in summary.skipped), summary.skipped


def test_a_full_index_reads_nothing_through_a_symlinked_folder(appliance: Any, embedder: TritonEmbedder,
                                                                tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    name = f"symlinked-full-{uuid.uuid4().hex[:6]}"
    root, secret = _repo_with_a_folder_swapped_for_a_symlink(tmp_path)
    _swap(root)  # git's index still lists lib/leak.py
    summary = Indexer(url, embedder).index_repository(root, name)
    assert secret not in _symbols(url, name)
    assert any(s.path == "lib/leak.py" and "outside" in s.reason for s in summary.skipped), summary.skipped
