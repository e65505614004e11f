from typing import Any

import pytest
from sqlalchemy import text

from db.migrations import MIGRATIONS, current_version, migrate
from db.session import engine_for

pytestmark = pytest.mark.services


def test_migrations_created_vector_and_are_idempotent(appliance: Any) -> None:
    url = appliance.settings.effective_database_url()
    assert current_version(url) == MIGRATIONS[-1].version
    assert migrate(url) == []  # applying again changes nothing
    with engine_for(url).connect() as conn:
        names = {r[0] for r in conn.execute(text("SELECT extname FROM pg_extension"))}
    assert {"vector", "pg_trgm"} <= names


def test_hnsw_nearest_neighbour_query(appliance: Any) -> None:
    url = appliance.settings.effective_database_url()
    with engine_for(url).begin() as conn:
        conn.execute(text("CREATE TEMP TABLE items (id int PRIMARY KEY, embedding vector(3))"))
        rows = [(i, f"[{i},{i % 7},{(i * 3) % 11}]") for i in range(1, 400)]
        conn.execute(text("INSERT INTO items VALUES (:id, CAST(:e AS vector))"),
                     [{"id": i, "e": e} for i, e in rows])
        conn.execute(text("CREATE INDEX ON items USING hnsw (embedding vector_cosine_ops)"))
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(text(
            "EXPLAIN SELECT id FROM items ORDER BY embedding <=> '[10,3,8]' LIMIT 3")))
        assert "hnsw" in plan.lower() or "items_embedding_idx" in plan
        nearest = [r[0] for r in conn.execute(text(
            "SELECT id FROM items ORDER BY embedding <=> '[10,3,8]' LIMIT 3"))]
        exact = [r[0] for r in conn.execute(text(
            "SELECT id FROM (SELECT id, embedding <=> '[10,3,8]' AS d FROM items) s ORDER BY d LIMIT 1"))]
    assert nearest[0] == exact[0] == 10
