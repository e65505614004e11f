"""Schema migrations: an ordered list, each applied once, recorded in ``schema_migrations``.

Kept as plain SQL in code (no Alembic) because the schema is small and the embedded
server is always at the version we ship. A PostgreSQL advisory lock makes two
processes starting at once apply each migration exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from db.session import engine_for

_LOCK_KEY = 0x63747870  # "ctxp"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "extensions",
        (
            "CREATE EXTENSION IF NOT EXISTS vector",
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
        ),
    ),
)


def migrate(url: str) -> list[int]:
    """Apply what is missing; returns the versions applied now."""
    applied_now: list[int] = []
    with engine_for(url).begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        conn.execute(text(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        ))
        done = {row[0] for row in conn.execute(text("SELECT version FROM schema_migrations"))}
        for migration in MIGRATIONS:
            if migration.version in done:
                continue
            for statement in migration.statements:
                conn.execute(text(statement))
            conn.execute(
                text("INSERT INTO schema_migrations (version, name) VALUES (:v, :n)"),
                {"v": migration.version, "n": migration.name},
            )
            applied_now.append(migration.version)
    return applied_now


def current_version(url: str) -> int:
    with engine_for(url).connect() as conn:
        row = conn.execute(text("SELECT coalesce(max(version), 0) FROM schema_migrations")).first()
    return int(row[0]) if row else 0
