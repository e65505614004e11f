"""The coarse filter of a request: the files near the one being edited, each with why it was chosen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import IndexedFile, Repository
from db.scope import ScopeError, visible


@dataclass
class CoarseFiles:
    """The file-level filter of a request, each path with why it was chosen."""

    reasons: dict[str, list[str]] = field(default_factory=dict)

    def add(self, path: str, reason: str) -> None:
        self.reasons.setdefault(path, [])
        if reason not in self.reasons[path]:
            self.reasons[path].append(reason)

    @property
    def paths(self) -> list[str]:
        return list(self.reasons)


def coarse_files(
    session: Session,
    repositories: Sequence[str],
    *,
    path: str,
    imports: Sequence[str],
    module_keys: Sequence[str],
    recent_limit: int = 20,
    folder_limit: int = 50,
    viewer: str | None = None,
) -> CoarseFiles:
    """Files near ``path``: the same folder, the files it imports, the files importing it, and the
    repository's most recently edited files, as ``viewer`` sees the index (None: the shared index)."""
    if not repositories:
        raise ScopeError("no readable repository given: refusing an unscoped search")
    base = (select(IndexedFile.path).join(Repository, Repository.id == IndexedFile.repo_id)
            .where(Repository.name.in_(list(repositories)), IndexedFile.deleted.is_(False),
                   IndexedFile.chunk_count > 0, IndexedFile.path != path,
                   visible(IndexedFile.repo_id, IndexedFile.path, IndexedFile.owner, viewer)))
    out = CoarseFiles()
    if imports:
        for (p,) in session.execute(base.where(IndexedFile.module_keys.overlap(list(imports))).limit(folder_limit)):
            out.add(p, "imported")
    if module_keys:
        for (p,) in session.execute(base.where(IndexedFile.imports.overlap(list(module_keys))).limit(folder_limit)):
            out.add(p, "imports this file")
    folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    same_folder = base.where(IndexedFile.path.like(like_literal(folder) + "%"),
                             ~IndexedFile.path.like(like_literal(folder) + "%/%"))
    for (p,) in session.execute(same_folder.limit(folder_limit)):
        out.add(p, "same folder")
    recent = base.where(IndexedFile.edited_at.is_not(None)).order_by(IndexedFile.edited_at.desc()).limit(recent_limit)
    for (p,) in session.execute(recent):
        out.add(p, "recently edited")
    return out


def like_literal(text: str) -> str:
    """``text`` matched literally in a LIKE pattern. The escape character (backslash, PostgreSQL's default)
    first: a folder named ``a\\b`` would otherwise match ``ab``, and one ending in a backslash escape the ``%``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
