"""Which repository a file belongs to, and its path there: the git work tree's root, named as
``ctxpress index`` names it (``ctxpress_core.repository_name``), so retrieval finds its index."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from ctxpress_core.repository_name import clone_config, repository_name


@dataclass(frozen=True)
class Location:
    repository: str
    path: str  # relative to the root, "/"-separated
    root: Path | None = None
    remote: str | None = None  # the origin's URL, where there is one


def git_root(path: Path) -> Path | None:
    for folder in [path, *path.parents]:
        if (folder / ".git").exists():
            return folder
    return None


def locate(uri: str, workspace_roots: list[Path], repository: str | None = None) -> Location:
    """``repository``: the user's override of the id (initializationOptions)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        name = PurePosixPath(unquote(parsed.path or uri)).name or "untitled"
        return Location(repository or "untitled", name)
    file = Path(unquote(parsed.path))
    root = git_root(file.parent)
    if root is None:
        root = next((r for r in workspace_roots if file.is_relative_to(r)), file.parent)
    remote = clone_config(root)[1] if (root / ".git").exists() else None
    return Location(repository or repository_name(root), file.relative_to(root).as_posix(), root, remote)
