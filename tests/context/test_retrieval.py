"""Cross-file retrieval (mode=optimized) against the real index, embedder and database."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from context.packing.tokens import rough_token_count
from context.sources.retrieval import (
    SKIPS,
    RetrievedChunk,
    Retriever,
    adaptive_threshold,
    plan_query,
    render_retrieved,
)
from indexer.pipeline import Indexer
from serving.triton_client import AsyncTritonEmbedder, TritonEmbedder
from tests.indexer.index_repo import FILES, make_repo

CHECKOUT = '''from shop.models import Order
from shop.pricing import order_total


def checkout(order: Order, country: str) -> str:
    total = order_total(order)
    return f"{total}"
'''


def test_threshold_rises_when_the_file_explains_the_cursor_and_falls_when_it_does_not() -> None:
    assert adaptive_threshold(0.3, ["a", "b"], []) > 0.3
    assert adaptive_threshold(0.3, ["a", "b"], ["a", "b"]) < 0.3
    assert adaptive_threshold(0.3, [], []) == 0.3


def test_plan_query_finds_identifiers_defined_elsewhere() -> None:
    plan = plan_query("shop/checkout.py", CHECKOUT, 5, "python")
    assert "order_total" in plan.unresolved and "Order" in plan.unresolved
    assert "total" not in plan.identifiers  # a local variable is not something to retrieve
    assert "shop/pricing" in plan.imports and "shop/checkout" in plan.module_keys
    local = plan_query("shop/pricing.py", FILES["shop/pricing.py"], 17, "python")
    assert "VAT_RATE" in local.identifiers and "VAT_RATE" not in local.unresolved  # defined in the file


def _chunk(symbol: str, signature: str, content: str, kind: str = "function") -> RetrievedChunk:
    return RetrievedChunk("r", f"{symbol}.py", symbol, kind, "python", 0, content.count("\n") - 1, signature, content,
                          1.0, 0.9, ["vector"], ["imported"])


def test_render_puts_summaries_first_and_bodies_when_the_budget_allows() -> None:
    small = _chunk("small", "def small(): ...\n", "def small():\n    return 1\n")
    big = _chunk("big", "def big(): ...\n", "def big():\n" + "    x = 1\n" * 200)
    text, chosen = render_retrieved([big, small], 120, rough_token_count, "python")
    forms = {c.chunk.symbol: c.form for c in chosen}
    assert forms == {"big": "summary", "small": "whole"}
    assert text.index("# big.py:1-201") < text.index("# small.py:1-2") and "return 1" in text
    assert sum(c.tokens for c in chosen) <= 120


@pytest.fixture(scope="module")
def indexed(appliance: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    name = f"retr-{uuid.uuid4().hex[:6]}"
    embedder = TritonEmbedder(appliance.settings.effective_triton_url())
    try:
        indexer = Indexer(appliance.settings.effective_database_url(), embedder)
        indexer.index_repository(make_repo(tmp_path_factory.mktemp("retr") / "shop"), name)
        other = make_repo(tmp_path_factory.mktemp("retr-other") / "other", {"pay.py": (
            "def order_total(order):\n    return 42  # another team's code\n")})
        indexer.index_repository(other, f"{name}-other")
    finally:
        embedder.close()
    yield name


@pytest.fixture
async def retriever(appliance: Any) -> AsyncIterator[Retriever]:
    embedder = AsyncTritonEmbedder(appliance.settings.effective_triton_url())
    r = Retriever(appliance.settings.effective_database_url(), embedder, timeout_ms=500, top_k=4)
    yield r
    r.close()
    await embedder.close()


@pytest.mark.services
async def test_retrieves_the_definitions_the_cursor_code_uses(indexed: str, retriever: Retriever) -> None:
    result = await retriever.retrieve(repositories=[indexed], path="shop/checkout.py", text=CHECKOUT, line=5)
    symbols = [c.symbol for c in result.chunks]
    assert "order_total" in symbols[:2], symbols
    top = next(c for c in result.chunks if c.symbol == "order_total")
    assert top.path == "shop/pricing.py" and "imported" in top.file_reasons and "lexical" in top.found_by
    assert all(c.repository == indexed for c in result.chunks)  # never another repository's order_total
    report = result.report
    assert report.skipped is None and report.coarse_reasons.get("imported", 0) >= 2
    assert report.threshold < 0.3  # identifiers defined elsewhere: a lower bar


@pytest.mark.services
async def test_never_returns_the_cursor_file(indexed: str, retriever: Retriever) -> None:
    result = await retriever.retrieve(repositories=[indexed], path="shop/pricing.py",
                                      text=FILES["shop/pricing.py"], line=17)
    assert result.chunks and all(c.path != "shop/pricing.py" for c in result.chunks)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.services
async def test_a_database_that_is_down_or_slow_is_skipped(appliance: Any, indexed: str) -> None:
    embedder = AsyncTritonEmbedder(appliance.settings.effective_triton_url())
    down = Retriever(f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/postgres", embedder)
    slow = Retriever(appliance.settings.effective_database_url(), embedder, timeout_ms=0.5)
    try:
        before = dict(SKIPS)
        started = time.perf_counter()
        result = await down.retrieve(repositories=[indexed], path="shop/checkout.py", text=CHECKOUT, line=5)
        assert result.chunks == [] and result.report.skipped == "db-error"
        assert time.perf_counter() - started < 1.0
        result = await slow.retrieve(repositories=[indexed], path="shop/checkout.py", text=CHECKOUT, line=5)
        assert result.chunks == [] and result.report.skipped == "db-timeout"
        assert result.report.elapsed_ms < 300
        assert SKIPS["db-error"] == before.get("db-error", 0) + 1
        assert SKIPS["db-timeout"] == before.get("db-timeout", 0) + 1
    finally:
        down.close()
        slow.close()
        await embedder.close()


@pytest.mark.services
async def test_completion_worker_puts_retrieved_chunks_in_the_prompt(appliance: Any, indexed: str,
                                                                     nats_client: Any) -> None:
    import json

    request = {"repository": indexed, "path": "shop/checkout.py", "text": CHECKOUT, "line": 5, "column": 0,
               "max_tokens": 4, "mode": "optimized"}
    reply = json.loads((await nats_client.request(appliance.settings.completion_subject,
                                                  json.dumps(request).encode(), timeout=120)).data)
    assert "error" not in reply, reply
    ctx = reply["context"]
    assert "retrieval" in ctx["sources"], json.dumps(ctx.get("retrieval"))
    retrieved = [b for b in ctx["blocks"] if b["kind"] == "retrieved"]
    assert any(b["name"] == "shop/pricing.py:order_total" for b in retrieved), retrieved
    assert ctx["retrieval"]["skipped"] is None
    assert ctx["context_tokens"] <= ctx["budget_tokens"]
    # the ablation switch turns it off
    off = json.loads((await nats_client.request(appliance.settings.completion_subject, json.dumps(
        {**request, "features": {"retrieval": False}}).encode(), timeout=120)).data)
    assert "retrieval" not in off["context"]["sources"] and off["context"]["retrieval"] is None
