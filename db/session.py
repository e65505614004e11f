"""SQLAlchemy engines for the configured database."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DataError, IntegrityError, OperationalError


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 5})


def can_connect(url: str) -> bool:
    try:
        with engine_for(url).connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except OperationalError:
        return False


# SQLSTATE classes of errors about the values sent, not the server's state: data exception (a NUL in text, an
# integer out of range), integrity constraint violation, program limit exceeded (an index entry too large).
_REFUSED_VALUE_CLASSES = frozenset({"22", "23", "54"})


def refuses_values(exc: BaseException) -> bool:
    """Whether the database (or its driver, before sending) refused the values of a statement: sending the same
    values again can never succeed, unlike a lost connection or a server that is down."""
    if isinstance(exc, DataError | IntegrityError):
        return True
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None) or ""
    return sqlstate[:2] in _REFUSED_VALUE_CLASSES
