"""SQLAlchemy engines for the configured database."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError


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
