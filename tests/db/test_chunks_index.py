"""Indexing into the real PostgreSQL + pgvector through the real Triton embedder."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from ctxpress_core.errors import EmbeddingError
from db.chunk_search import search_chunks
from db.models import CodeChunk, IndexedFile, Repository
from db.scope import ScopeError
from db.session import engine_for
from indexer.chunks import identifier_words
from indexer.pipeline import FileChange, Indexer
from serving.triton_client import TritonEmbedder
from tests.indexer.index_repo import FILES, git, make_repo

pytestmark = pytest.mark.services


@pytest.fixture
def indexer(appliance: Any, embedder: TritonEmbedder) -> Indexer:
    return Indexer(appliance.settings.effective_database_url(), embedder)


def _search(url: str, repos: list[str], query: str, embedder: TritonEmbedder, k: int = 5) -> list[Any]:
    with Session(engine_for(url)) as session, session.begin():
        return search_chunks(session, repos, query_vector=embedder.embed([query])[0],
                             words=identifier_words(query), k=k)


def _chunk_rows(url: str, repo: str) -> set[tuple[str, str, str, int]]:
    with Session(engine_for(url)) as session:
        rows = session.execute(select(CodeChunk.path, CodeChunk.symbol, CodeChunk.content_hash, CodeChunk.id)
                               .join(Repository).where(Repository.name == repo))
        return {tuple(r) for r in rows}


def test_schema_has_hnsw_and_lexical_indexes(appliance: Any) -> None:
    with engine_for(appliance.settings.effective_database_url()).connect() as conn:
        indexes = {r[0]: r[1] for r in conn.execute(text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'code_chunks'"))}
    hnsw = indexes["code_chunks_embedding_hnsw"]
    assert "hnsw" in hnsw and "vector_cosine_ops" in hnsw
    assert "gin" in indexes["code_chunks_tsv"] and "gin_trgm_ops" in indexes["code_chunks_symbol_trgm"]


def test_index_a_repository_then_reindex_writes_nothing(appliance: Any, indexer: Indexer, embedder: TritonEmbedder,
                                                        tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    name = f"shop-{uuid.uuid4().hex[:6]}"
    root = make_repo(tmp_path / "shop")
    summary = indexer.index_repository(root, name)
    assert summary.files_indexed == 6 and summary.chunks_written == summary.chunks_total == 13
    reasons = {s.path: s.reason for s in summary.skipped}
    assert reasons["broken.py"] == "syntax error at line 1"  # a broken file is skipped with a reason
    assert reasons[".env"] == "secret" and reasons["vendor/lib/helper.py"] == "vendored"
    with Session(engine_for(url)) as session:
        row = session.scalars(select(IndexedFile).join(Repository).where(
            Repository.name == name, IndexedFile.path == "broken.py")).one()
        assert row.skipped_reason == "syntax error at line 1" and row.chunk_count == 0
        pricing = session.scalars(select(IndexedFile).join(Repository).where(
            Repository.name == name, IndexedFile.path == "shop/pricing.py")).one()
        assert "shop/models" in pricing.imports  # the file's imports, for the coarse filter
        secrets = session.scalar(select(func.count()).select_from(CodeChunk).join(Repository).where(
            Repository.name == name, CodeChunk.content.like("%sk-live%")))
        assert secrets == 0

    before = _chunk_rows(url, name)
    again = indexer.index_repository(root, name)
    assert again.files_unchanged == 6 and again.chunks_written == 0 and again.chunks_deleted == 0
    assert _chunk_rows(url, name) == before  # same rows, same ids: nothing was rewritten

    hits = _search(url, [name], "total price of an order including VAT", embedder)
    assert hits[0].symbol == "order_total" and "vector" in hits[0].found_by
    assert hits[0].similarity is not None and hits[0].similarity > 0.4
    lexical = _search(url, [name], "formatPrice", embedder)
    assert lexical[0].symbol == "formatPrice" and lexical[0].found_by == ["vector", "lexical"]


def test_edit_rename_and_delete_touch_only_what_changed(appliance: Any, indexer: Indexer, tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    name = f"shop-{uuid.uuid4().hex[:6]}"
    root = make_repo(tmp_path / "shop")
    indexer.index_repository(root, name)
    before = _chunk_rows(url, name)
    edited = FILES["shop/pricing.py"].replace("(100 - percent) / 100", "(100 - percent) / Decimal(100)")
    (root / "shop" / "pricing.py").write_text(edited)
    git(root, "mv", "shop/shipping.py", "shop/delivery.py")
    git(root, "rm", "-q", "web/format.ts")
    summary = indexer.index_changed(root, name)
    assert summary.chunks_written == 2  # apply_discount's new body + shipping_cost under its new path
    assert summary.vectors_reused >= 1  # the moved function's vector is not computed again
    after = _chunk_rows(url, name)
    paths = {r[0] for r in after}
    assert "web/format.ts" not in paths and "shop/shipping.py" not in paths and "shop/delivery.py" in paths
    unchanged = {r for r in before if r[0] in ("shop/models.py", "web/client.ts") or r[1] == "order_total"}
    assert unchanged <= after


def test_search_is_scoped_to_readable_repositories(appliance: Any, indexer: Indexer, embedder: TritonEmbedder,
                                                   tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    mine, theirs = f"mine-{uuid.uuid4().hex[:6]}", f"theirs-{uuid.uuid4().hex[:6]}"
    indexer.index_repository(make_repo(tmp_path / "mine"), mine)
    secret_repo = make_repo(tmp_path / "theirs", {"payroll.py": (
        "def compute_order_total_with_vat(order):\n    return sum(l.price for l in order.lines) * 1.2\n")})
    indexer.index_repository(secret_repo, theirs)
    hits = _search(url, [mine], "compute_order_total_with_vat", embedder, k=20)
    assert hits and all(h.repository == mine for h in hits)
    assert "compute_order_total_with_vat" not in {h.symbol for h in hits}
    both = _search(url, [mine, theirs], "compute_order_total_with_vat", embedder)
    assert both[0].symbol == "compute_order_total_with_vat" and both[0].repository == theirs
    with pytest.raises(ScopeError), Session(engine_for(url)) as session:
        search_chunks(session, [], query_vector=None, words=["order"])


def test_failure_before_the_write_changes_nothing(appliance: Any, tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    name = f"shop-{uuid.uuid4().hex[:6]}"
    down = TritonEmbedder("127.0.0.1:1", timeout_s=2)
    try:
        with pytest.raises(EmbeddingError):
            Indexer(url, down).index_repository(make_repo(tmp_path / "shop"), name)
        with pytest.raises(EmbeddingError):
            Indexer(url, down).apply_changes(name, [FileChange("a.py", "def a():\n    return 1\n")])
    finally:
        down.close()
    with Session(engine_for(url)) as session:
        assert session.scalar(select(func.count()).select_from(Repository).where(Repository.name == name)) == 0
