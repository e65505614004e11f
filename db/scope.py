"""Whose rows of the repository index a read sees.

Every read is scoped to the repositories a caller may read (none given: ``ScopeError``, never everything).
Within them, the owner is ``SHARED`` for the shared index (what was committed, and every save of a single-user
appliance) or a user's name for that user's saved, uncommitted files in team mode. A search made for a user
(``viewer``) reads the shared index, except the files the user saved, of which it reads the user's version;
no search reads another user's saves.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, exists, or_
from sqlalchemy.orm import aliased

from ctxpress_core.errors import CtxpressError
from db.models import IndexedFile

SHARED = ""  # the owner of the shared index's rows


class ScopeError(CtxpressError, ValueError):
    """A query without any readable repository: refused rather than searching everything."""


def visible(repo_id: Any, path: Any, owner: Any, viewer: str | None) -> ColumnElement[bool]:
    """The rows ``viewer`` reads: their own saves, and the shared index's files they have not saved."""
    if viewer is None or viewer == SHARED:
        return owner == SHARED  # type: ignore[no-any-return]
    saved = aliased(IndexedFile)
    own_version = exists().where(saved.repo_id == repo_id, saved.path == path, saved.owner == viewer)
    return or_(owner == viewer, and_(owner == SHARED, ~own_version))
