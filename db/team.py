"""Team users and their repository grants (tables ``team_users``, ``team_grants``; see ctxpress/team.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from ctxpress_core.errors import CtxpressError
from db.session import engine_for


class UnknownUser(CtxpressError, LookupError):
    pass


class UserExists(CtxpressError, ValueError):
    pass


@dataclass
class UserRow:
    name: str
    created_at: datetime
    repositories: list[str] = field(default_factory=list)
    kind: str = "developer"


def add_user(url: str, name: str, password_hash: str, repositories: Iterable[str], kind: str = "developer") -> None:
    try:
        with engine_for(url).begin() as conn:
            conn.execute(text("INSERT INTO team_users (name, password_hash, kind) VALUES (:n, :h, :k)"),
                         {"n": name, "h": password_hash, "k": kind})
            _grant(conn, name, repositories)
    except IntegrityError:
        raise UserExists(f"user {name!r} exists already") from None


def grant(url: str, name: str, repositories: Iterable[str]) -> None:
    with engine_for(url).begin() as conn:
        _require(conn, name)
        _grant(conn, name, repositories)


def revoke(url: str, name: str, repositories: Iterable[str]) -> int:
    """Returns how many grants were removed."""
    with engine_for(url).begin() as conn:
        _require(conn, name)
        result = conn.execute(text("DELETE FROM team_grants WHERE user_name = :n AND repository = ANY(:r)"),
                              {"n": name, "r": list(repositories)})
        return int(result.rowcount or 0)


def remove_user(url: str, name: str) -> int:
    """The user, their grants and their saved versions of files (the index rows they own): a new user of the
    same name starts with none of them. Returns how many saved files were removed."""
    with engine_for(url).begin() as conn:
        if conn.execute(text("DELETE FROM team_users WHERE name = :n"), {"n": name}).rowcount == 0:
            raise UnknownUser(f"no user {name!r}")
        conn.execute(text("DELETE FROM code_chunks WHERE owner = :n"), {"n": name})
        return int(conn.execute(text("DELETE FROM indexed_files WHERE owner = :n"), {"n": name}).rowcount or 0)


def list_users(url: str) -> list[UserRow]:
    with engine_for(url).connect() as conn:
        rows = conn.execute(text(
            "SELECT u.name, u.created_at, coalesce(array_agg(g.repository ORDER BY g.repository)"
            " FILTER (WHERE g.repository IS NOT NULL), '{}'), u.kind"
            " FROM team_users u LEFT JOIN team_grants g ON g.user_name = u.name GROUP BY u.name ORDER BY u.name"))
        return [UserRow(name, created, list(repos), kind) for name, created, repos, kind in rows]


def password_hashes(url: str) -> list[tuple[str, str, str]]:
    """(name, bcrypt hash, kind) of every user."""
    with engine_for(url).connect() as conn:
        return [(n, h, k) for n, h, k in conn.execute(text(
            "SELECT name, password_hash, kind FROM team_users ORDER BY name"))]


def set_password(url: str, name: str, password_hash: str) -> str:
    """A user's new password (its hash); returns the user's kind."""
    with engine_for(url).begin() as conn:
        row = conn.execute(text("UPDATE team_users SET password_hash = :h WHERE name = :n RETURNING kind"),
                           {"n": name, "h": password_hash}).first()
    if row is None:
        raise UnknownUser(f"no user {name!r}")
    return str(row[0])


def kind_of(url: str, name: str) -> str | None:
    """A user's kind (``developer``, ``hooks``); None for an unknown (or removed) user."""
    with engine_for(url).connect() as conn:
        row = conn.execute(text("SELECT kind FROM team_users WHERE name = :n"), {"n": name}).first()
        return None if row is None else str(row[0])


def grants_of(url: str, name: str) -> tuple[frozenset[str], str | None]:
    """The repositories ``name`` may use, and their account: the name with the moment it was added, never the same
    for a user removed and added again (what the workers key a user's engine caches by). Empty and None for an
    unknown (or removed) user."""
    with engine_for(url).connect() as conn:
        rows = conn.execute(text("SELECT g.repository, u.created_at FROM team_grants g"
                                 " JOIN team_users u ON u.name = g.user_name WHERE g.user_name = :n"), {"n": name})
        found = rows.all()
    # microseconds since the epoch: no ":" in an account, which engine cache keys use as their separator
    account = f"{name}@{int(found[0].created_at.timestamp() * 1_000_000)}" if found else None
    return frozenset(r.repository for r in found), account


def _require(conn: Connection, name: str) -> None:
    found = conn.execute(text("SELECT 1 FROM team_users WHERE name = :n"), {"n": name}).first()
    if found is None:
        raise UnknownUser(f"no user {name!r}")


def _grant(conn: Connection, name: str, repositories: Iterable[str]) -> None:
    for repository in repositories:
        conn.execute(text("INSERT INTO team_grants (user_name, repository) VALUES (:n, :r) ON CONFLICT DO NOTHING"),
                     {"n": name, "r": repository})
