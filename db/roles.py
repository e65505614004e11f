"""Per-service PostgreSQL roles: each service logs in with the least it needs.

- ``ctxpress_completion`` (the completion workers): reads the index and the grants, appends telemetry.
- ``ctxpress_indexer`` (the index workers): writes the index, reads the grants.
- ``ctxpress_admin`` (the CLI: ``ctxpress users``, ``stats``, migrations): owns the tables; not a superuser, creates
  no roles or databases.

Nobody but the admin reads ``team_users`` (the password hashes). ``ensure_roles`` is run with a superuser's URL once
when a deployment is set up and again after an upgrade (it is idempotent, and grants what new tables need); the
extensions the schema needs are created then, as only a superuser may.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import quote

from sqlalchemy import text
from sqlalchemy.engine import make_url

from db.migrations import migrate
from db.session import engine_for

INDEX_TABLES = ("repositories", "indexed_files", "code_chunks")
TELEMETRY_TABLES = ("completion_events", "completion_feedback")
GRANT_TABLES = ("team_grants",)
# The team console's (ctxpress/console): its admins and sessions, the audit log and the usage rollup; the admin's only.
CONSOLE_TABLES = ("console_admins", "console_sessions", "audit_log", "usage_hourly", "usage_daily",
                  "usage_rollup_state")
ALL_TABLES = (*INDEX_TABLES, *TELEMETRY_TABLES, GRANT_TABLES[0], "team_users", *CONSOLE_TABLES, "schema_migrations")


@dataclass(frozen=True)
class Role:
    service: str  # what the settings and files call it
    name: str  # the PostgreSQL role
    tables: tuple[tuple[str, tuple[str, ...]], ...]  # (privileges, tables)
    sequences: tuple[str, ...]  # the serial columns it inserts into

    def statements(self) -> list[str]:
        found = [f"REVOKE ALL ON {', '.join(ALL_TABLES)} FROM {self.name}"]
        found += [f"GRANT {privileges} ON {', '.join(tables)} TO {self.name}" for privileges, tables in self.tables]
        if self.sequences:
            found.append(f"GRANT USAGE ON SEQUENCE {', '.join(self.sequences)} TO {self.name}")
        return found


# What the workers read of a user (db.team.grants_of, db.team.kind_of): never the password hash.
ACCOUNT_COLUMNS = ("SELECT (name, created_at, kind)", ("team_users",))
COMPLETION = Role("completion", "ctxpress_completion",
                  (("SELECT", (*INDEX_TABLES, *GRANT_TABLES)), ("INSERT", TELEMETRY_TABLES), ACCOUNT_COLUMNS),
                  ("completion_events_id_seq", "completion_feedback_id_seq"))
INDEXER = Role("indexer", "ctxpress_indexer",
               (("SELECT, INSERT, UPDATE, DELETE", INDEX_TABLES), ("SELECT", GRANT_TABLES), ACCOUNT_COLUMNS),
               ("repositories_id_seq", "code_chunks_id_seq"))
ADMIN = "ctxpress_admin"
SERVICE_ROLES = (COMPLETION, INDEXER)
ROLE_NAMES = {**{role.service: role.name for role in SERVICE_ROLES}, "admin": ADMIN}  # by service


def role_url(base_url: str, role: str, password: str, host: str | None = None) -> str:
    url = make_url(base_url)
    login = f"{role}:{quote(password, safe='')}"
    where = f"{host or url.host}:{url.port or 5432}"
    return f"{url.drivername}://{login}@{where}/{url.database}"


def ensure_roles(superuser_url: str, passwords: dict[str, str | None]) -> dict[str, str]:
    """Migrate, then create or update the roles: each service's password is the one given (kept in sync) or a new
    one. Returns each service's password."""
    migrate(superuser_url)
    chosen = {service: passwords.get(service) or secrets.token_urlsafe(24) for service in ROLE_NAMES}
    with engine_for(superuser_url).begin() as conn:
        database = conn.execute(text("SELECT current_database()")).scalar_one()
        for service, name in ROLE_NAMES.items():
            exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name}).first()
            verb = "ALTER" if exists else "CREATE"
            # a password is not a bind parameter in DDL; it is generated here or read from a file written here
            literal = chosen[service].replace("'", "''")
            conn.execute(text(f"{verb} ROLE {name} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT "
                              f"PASSWORD '{literal}'"))
            conn.execute(text(f'GRANT CONNECT ON DATABASE "{database}" TO {name}'))
        conn.execute(text(f"GRANT USAGE, CREATE ON SCHEMA public TO {ADMIN}"))
        for table in ALL_TABLES:
            conn.execute(text(f"ALTER TABLE {table} OWNER TO {ADMIN}"))
        for role in SERVICE_ROLES:
            conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {role.name}"))
            for statement in role.statements():
                conn.execute(text(statement))
    return chosen
