"""How to reach the embedded PostgreSQL: its user, where its generated password is kept, its URL.

Stated here (not in ``db``) because the settings compute the database URL every layer connects with;
``db.embedded`` initialises the server with the same user and password file.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

DB_USER = "postgres"
PASSWORD_FILE = "password"


def database_url(host: str, port: int, password: str | None, database: str = "postgres") -> str:
    login = f"{DB_USER}:{quote(password, safe='')}" if password else DB_USER
    return f"postgresql+psycopg://{login}@{host}:{port}/{database}"


def stored_password(root: Path) -> str | None:
    """The password ``EmbeddedPostgres`` generated under ``root``, None before the first ``ctxpress up``."""
    try:
        return (root / PASSWORD_FILE).read_text().strip() or None
    except OSError:
        return None
