"""What retrieval finds for a query in some repositories (vector and lexical sides, fused): ``ctxpress search`` and
the console's search box."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ctxpress_core.settings import Settings


@dataclass
class SearchResult:
    hits: list[Any]  # db.chunk_search hits
    ms: float
    warning: str | None  # why only the lexical side ran


def search(settings: Settings, repositories: list[str], query: str, k: int = 10) -> SearchResult:
    """Raises ValueError on an empty query; sqlalchemy's OperationalError when the database is down."""
    import numpy as np
    from sqlalchemy.orm import Session

    from ctxpress_core.errors import EmbeddingError
    from db.chunk_search import search_chunks
    from db.session import engine_for
    from indexer.chunks import identifier_words
    from serving.triton_client import TritonEmbedder

    query = query.strip()
    if not query:
        raise ValueError("empty query")
    embedder = TritonEmbedder(settings.effective_triton_url())
    started = time.perf_counter()
    warning = None
    try:
        vector: np.ndarray | None = embedder.embed([query])[0]
    except EmbeddingError as exc:
        warning = f"{exc}; lexical search only"
        vector = None
    finally:
        embedder.close()
    with Session(engine_for(settings.effective_database_url())) as session, session.begin():
        hits = search_chunks(session, repositories, query_vector=vector, words=identifier_words(query), k=k)
    return SearchResult(list(hits), (time.perf_counter() - started) * 1000, warning)
