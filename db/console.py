"""The team console's tables (migration 9): its admins, their server-side sessions and the audit log.

A session row holds the SHA-256 of the cookie's token, never the token: whoever reads the table cannot sign in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from ctxpress_core.errors import CtxpressError
from db.session import engine_for


class AdminExists(CtxpressError, ValueError):
    pass


@dataclass(frozen=True)
class SessionRow:
    admin: str
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True)
class AuditRow:
    at: datetime
    actor: str
    action: str
    target: str
    detail: str
    source: str


def add_admin(url: str, name: str, password_hash: str, *, replace: bool = False) -> None:
    """A new admin; ``replace``: a new password for an existing one (its sessions end)."""
    with engine_for(url).begin() as conn:
        if replace:
            conn.execute(text("INSERT INTO console_admins (name, password_hash) VALUES (:n, :h)"
                              " ON CONFLICT (name) DO UPDATE SET password_hash = excluded.password_hash"),
                         {"n": name, "h": password_hash})
            conn.execute(text("DELETE FROM console_sessions WHERE admin_name = :n"), {"n": name})
            return
        try:
            conn.execute(text("INSERT INTO console_admins (name, password_hash) VALUES (:n, :h)"),
                         {"n": name, "h": password_hash})
        except IntegrityError:
            raise AdminExists(f"admin {name!r} exists already (--reset gives a new password)") from None


def admin_password_hash(url: str, name: str) -> str | None:
    with engine_for(url).connect() as conn:
        row = conn.execute(text("SELECT password_hash FROM console_admins WHERE name = :n"), {"n": name}).first()
    return None if row is None else str(row[0])


def create_session(url: str, token_hash: str, admin: str, csrf_token: str, lifetime: timedelta) -> None:
    with engine_for(url).begin() as conn:
        conn.execute(text("DELETE FROM console_sessions WHERE expires_at < now()"))
        conn.execute(text("INSERT INTO console_sessions (token_hash, admin_name, csrf_token, expires_at)"
                          " VALUES (:t, :a, :c, now() + :life)"),
                     {"t": token_hash, "a": admin, "c": csrf_token, "life": lifetime})


def find_session(url: str, token_hash: str) -> SessionRow | None:
    """The live session of this token hash; None when unknown or expired."""
    with engine_for(url).connect() as conn:
        row = conn.execute(text("SELECT admin_name, csrf_token, expires_at FROM console_sessions"
                                " WHERE token_hash = :t AND expires_at > now()"), {"t": token_hash}).first()
    return None if row is None else SessionRow(str(row[0]), str(row[1]), row[2])


def end_session(url: str, token_hash: str) -> None:
    with engine_for(url).begin() as conn:
        conn.execute(text("DELETE FROM console_sessions WHERE token_hash = :t"), {"t": token_hash})


def audit(url: str, actor: str, action: str, target: str = "", detail: str = "", source: str = "console") -> None:
    """One admin action: who, what, on what, and when (the row's own time)."""
    with engine_for(url).begin() as conn:
        conn.execute(text("INSERT INTO audit_log (actor, action, target, detail, source)"
                          " VALUES (:a, :w, :t, :d, :s)"),
                     {"a": actor, "w": action, "t": target, "d": detail[:1000], "s": source})


def audit_rows(url: str, limit: int = 200) -> list[AuditRow]:
    with engine_for(url).connect() as conn:
        rows = conn.execute(text("SELECT at, actor, action, target, detail, source FROM audit_log"
                                 " ORDER BY at DESC, id DESC LIMIT :n"), {"n": limit})
        return [AuditRow(*row) for row in rows]
