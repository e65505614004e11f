"""Issue 43, item 4: a clone's repository is named by its configuration and its remote, not by its folder, the
same way by every door (real git repositories; no services).

Before, ``ctxpress index``, the hooks it installs, the language server and ``ctxpress complete`` named a
repository after the clone's folder: a teammate's clone of ``web`` made as ``git clone …/web.git api`` indexed
into, and completed from, ``api``."""

from __future__ import annotations

from pathlib import Path

from ctxpress.client import repository_of
from ctxpress.http.editing import repository_from_git_url
from ctxpress.lsp.repository import locate
from ctxpress_core.repository_name import name_from_url, repository_name
from tests.indexer.index_repo import git

WEB = "git@github.com:example/web.git"


def _clone(root: Path, origin: str | None) -> Path:
    root.mkdir(parents=True)
    (root / "app.py").write_text("def main():\n    return 1\n")
    git(root, "init", "-q")
    if origin is not None:
        git(root, "remote", "add", "origin", origin)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return root


def _names(root: Path) -> set[str]:
    """What each door calls the clone at ``root``."""
    file = root / "app.py"
    return {repository_name(root), locate(file.as_uri(), [root]).repository, repository_of(file)[0]}


def test_a_clone_in_a_folder_named_like_another_repository_is_still_its_remotes(tmp_path: Path) -> None:
    api_folder = _clone(tmp_path / "api", WEB)
    assert _names(api_folder) == {"web"}  # before: {"api"}
    assert repository_from_git_url(WEB) == "web"  # Tabby's git_url, by the same rule


def test_the_clones_configuration_names_it_first(tmp_path: Path) -> None:
    root = _clone(tmp_path / "web", WEB)
    git(root, "config", "ctxpress.repository", "web-platform")
    assert _names(root) == {"web-platform"}
    worktree = tmp_path / "elsewhere"
    git(root, "worktree", "add", "-q", str(worktree))  # its config is the main clone's
    assert _names(worktree) == {"web-platform"}


def test_without_a_remote_the_folder_names_it(tmp_path: Path) -> None:
    assert _names(_clone(tmp_path / "scratch", None)) == {"scratch"}


def test_the_last_component_of_any_remote_url() -> None:
    for url in ("https://git.example.com/org/web.git", "https://git.example.com/org/web/", "ssh://git@host:22/web",
                "/srv/git/web.git", "file:///srv/git/web", WEB):
        assert name_from_url(url) == "web", url
    assert name_from_url("") is None and name_from_url(None) is None
