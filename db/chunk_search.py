"""The hybrid search of the repository index: a vector ranking and a lexical ranking fused by reciprocal rank,
as ``viewer`` sees the index (``db.scope``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import Select, func, select, text
from sqlalchemy.orm import Session

from db.models import CodeChunk, IndexedFile, Repository
from db.scope import ScopeError, visible

RRF_K = 60  # reciprocal rank fusion constant (Cormack et al.): damps the weight of the top ranks


@dataclass
class SearchHit:
    repository: str
    path: str
    symbol: str
    kind: str
    language: str
    start_line: int
    end_line: int
    signature: str
    content: str
    score: float  # fused (RRF) score
    similarity: float | None  # cosine similarity when the vector side found it
    found_by: list[str] = field(default_factory=list)  # "vector", "lexical"
    imports: list[str] = field(default_factory=list)  # the file's imports


def _scoped(stmt: Select, repositories: Sequence[str], viewer: str | None) -> Select:
    if not repositories:
        raise ScopeError("no readable repository given: refusing an unscoped search")
    stmt = stmt.join(Repository, Repository.id == CodeChunk.repo_id).where(Repository.name.in_(list(repositories)))
    return stmt.where(visible(CodeChunk.repo_id, CodeChunk.path, CodeChunk.owner, viewer))


def tsquery_text(words: Iterable[str]) -> str:
    """An OR query of identifier words (already lower-case [a-z0-9_])."""
    clean = [w for w in dict.fromkeys(words) if w and all(ch.isalnum() or ch == "_" for ch in w)]
    return " | ".join(clean[:64])


def search_chunks(
    session: Session,
    repositories: Sequence[str],
    *,
    query_vector: np.ndarray | None,
    words: Sequence[str],
    k: int = 10,
    candidates: int = 50,
    paths: Sequence[str] | None = None,
    exclude_paths: Sequence[str] = (),
    min_similarity: float | None = None,
    viewer: str | None = None,
) -> list[SearchHit]:
    """Top ``k`` chunks, as ``viewer`` sees the index (None: the shared index), by reciprocal rank fusion
    of a vector ranking (cosine, HNSW) and a lexical ranking (full-text match of identifier words, symbol
    names weighted above body words).

    ``paths`` restricts both sides to those files (the coarse filter); ``min_similarity`` drops hits
    below it unless one of ``words`` matches the chunk's own symbol name.
    """
    lists: dict[str, list[tuple[int, float]]] = {}
    if query_vector is not None:
        lists["vector"] = _vector_ranking(session, repositories, query_vector, candidates, paths, exclude_paths,
                                          viewer)
    query = tsquery_text(words)
    if query:
        lists["lexical"], named = _lexical_ranking(session, repositories, query, candidates, paths, exclude_paths,
                                                   viewer)
    else:
        named = set()
    fused: dict[int, float] = {}
    similarity: dict[int, float] = dict(lists.get("vector", []))
    lexical: dict[int, float] = dict(lists.get("lexical", []))
    for ranking in lists.values():
        for rank_no, (chunk_id, _) in enumerate(ranking):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + 1.0 / (RRF_K + rank_no + 1)
    if min_similarity is not None:
        # Below the threshold, a chunk stays only when an identifier names it (``order_total`` near the
        # cursor finds ``def order_total``); a word merely used in its body is not enough.
        fused = {i: s for i, s in fused.items() if i in named or similarity.get(i, -1.0) >= min_similarity}
    top = sorted(fused, key=lambda i: -fused[i])[:k]
    if not top:
        return []
    return _hits(session, top, fused, similarity, lexical)


def _within(stmt: Select, paths: Sequence[str] | None, exclude_paths: Sequence[str]) -> Select:
    if paths is not None:
        stmt = stmt.where(CodeChunk.path.in_(list(paths)))
    if exclude_paths:
        stmt = stmt.where(CodeChunk.path.not_in(list(exclude_paths)))
    return stmt


def _vector_ranking(session: Session, repositories: Sequence[str], query_vector: np.ndarray, candidates: int,
                    paths: Sequence[str] | None, exclude_paths: Sequence[str],
                    viewer: str | None) -> list[tuple[int, float]]:
    """(chunk id, cosine similarity) of the nearest chunks, most similar first."""
    distance = CodeChunk.embedding.cosine_distance(query_vector.astype(np.float32))
    stmt = _within(_scoped(select(CodeChunk.id, distance.label("d")), repositories, viewer), paths, exclude_paths)
    if paths is None:
        # The filter (repository, path) runs after the HNSW walk; iterative scans keep going until
        # enough rows pass it instead of returning fewer than asked.
        session.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
        session.execute(text("SET LOCAL hnsw.ef_search = 100"))
    rows = session.execute(stmt.order_by(distance).limit(candidates)).all()
    return sorted(((r.id, 1.0 - float(r.d)) for r in rows), key=lambda x: -x[1])


def _lexical_ranking(
    session: Session, repositories: Sequence[str], query: str, candidates: int, paths: Sequence[str] | None,
    exclude_paths: Sequence[str], viewer: str | None,
) -> tuple[list[tuple[int, float]], set[int]]:
    """(chunk id, text rank) of the chunks matching ``query``, best first; and those whose own symbol name
    matches it."""
    tsq = func.to_tsquery("simple", query)
    rank = func.ts_rank_cd(CodeChunk.tsv, tsq)
    name_hit = func.to_tsvector("simple", CodeChunk.name_lexemes).op("@@")(tsq)
    stmt = _scoped(select(CodeChunk.id, rank.label("r"), name_hit.label("n")), repositories, viewer).where(
        CodeChunk.tsv.op("@@")(tsq))
    rows = session.execute(_within(stmt, paths, exclude_paths).order_by(rank.desc()).limit(candidates)).all()
    return [(r.id, float(r.r)) for r in rows], {r.id for r in rows if r.n}


def _hits(session: Session, top: list[int], fused: dict[int, float], similarity: dict[int, float],
          lexical: dict[int, float]) -> list[SearchHit]:
    """The chunks ``top``, in that order, with their repository, their file's imports and their scores."""
    rows = session.execute(
        select(CodeChunk, Repository.name, IndexedFile.imports)
        .join(Repository, Repository.id == CodeChunk.repo_id)
        .outerjoin(IndexedFile, (IndexedFile.repo_id == CodeChunk.repo_id) & (IndexedFile.path == CodeChunk.path)
                   & (IndexedFile.owner == CodeChunk.owner))
        .where(CodeChunk.id.in_(top))
    ).all()
    by_id = {row[0].id: row for row in rows}
    hits: list[SearchHit] = []
    for chunk_id in top:
        if chunk_id not in by_id:
            continue  # deleted between the two statements
        c, repo_name, imports = by_id[chunk_id]
        hits.append(SearchHit(
            repository=repo_name, path=c.path, symbol=c.symbol, kind=c.kind, language=c.language,
            start_line=c.start_line, end_line=c.end_line, signature=c.signature, content=c.content,
            score=fused[chunk_id], similarity=similarity.get(chunk_id),
            found_by=[side for side, ranked in (("vector", similarity), ("lexical", lexical)) if chunk_id in ranked],
            imports=list(imports or []),
        ))
    return hits
