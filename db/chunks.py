"""Writes and reads of the repository index: upserts by chunk identity, deletes, and the hybrid
(vector + lexical) search, always scoped to the repositories a caller may read.

Chunk identity is (repository, path, owner, symbol, content hash): re-indexing an unchanged file
finds every key already present and writes nothing; a changed function adds one row and removes one.

The owner is ``SHARED`` for the shared index (what was committed, and every save of a single-user
appliance) or a user's name for that user's saved, uncommitted files in team mode. A search made for
a user (``viewer``) reads the shared index, except the files the user saved, of which it reads the
user's version; no search reads another user's saves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Select, and_, bindparam, delete, exists, func, or_, select, text, tuple_
from sqlalchemy.dialects.postgresql import distinct_on, insert
from sqlalchemy.orm import Session, aliased

from ctxpress_core.errors import CtxpressError
from db.models import CodeChunk, IndexedFile, Repository

RRF_K = 60  # reciprocal rank fusion constant (Cormack et al.): damps the weight of the top ranks
SHARED = ""  # the owner of the shared index's rows


class ScopeError(CtxpressError, ValueError):
    """A query without any readable repository: refused rather than searching everything."""


@dataclass(frozen=True)
class FileRow:
    content_hash: str | None
    source_seq: int
    deleted: bool
    skipped_reason: str | None


@dataclass
class ChunkRow:
    """What a writer hands over: a chunk plus its vector (see ``indexer.chunks.Chunk``)."""

    symbol: str
    kind: str
    language: str
    start_line: int
    end_line: int
    signature: str
    content: str
    content_hash: str
    name_lexemes: str
    lexemes: str
    embedding: np.ndarray


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
    lexical_rank: float | None
    found_by: list[str] = field(default_factory=list)  # "vector", "lexical"
    imports: list[str] = field(default_factory=list)  # the file's imports


# ---------------------------------------------------------------------------------------------
# Repositories and files


def lock_repository(session: Session, name: str) -> None:
    """Serialise writers of one repository (the CLI and index workers) until the transaction ends."""
    session.execute(text("SELECT pg_advisory_xact_lock(hashtext('ctxpress-index'), hashtext(:n))"), {"n": name})


def ensure_repository(session: Session, name: str, root: str | None = None) -> Repository:
    stmt = insert(Repository).values(name=name, root=root).on_conflict_do_nothing(index_elements=["name"])
    session.execute(stmt)
    repo = session.scalars(select(Repository).where(Repository.name == name)).one()
    if root and repo.root != root:
        repo.root = root
    return repo


def find_repository(session: Session, name: str) -> Repository | None:
    return session.scalars(select(Repository).where(Repository.name == name)).one_or_none()


def file_rows(session: Session, repo_id: int, paths: Iterable[str] | None = None,
              owner: str = SHARED) -> dict[str, FileRow]:
    stmt = select(IndexedFile.path, IndexedFile.content_hash, IndexedFile.source_seq, IndexedFile.deleted,
                  IndexedFile.skipped_reason).where(IndexedFile.repo_id == repo_id, IndexedFile.owner == owner)
    if paths is not None:
        stmt = stmt.where(IndexedFile.path.in_(list(paths)))
    return {r.path: FileRow(r.content_hash, r.source_seq, r.deleted, r.skipped_reason) for r in session.execute(stmt)}


def chunk_keys(session: Session, repo_id: int, path: str, owner: str = SHARED) -> set[tuple[str, str]]:
    rows = session.execute(select(CodeChunk.symbol, CodeChunk.content_hash)
                           .where(CodeChunk.repo_id == repo_id, CodeChunk.path == path, CodeChunk.owner == owner))
    return {(r.symbol, r.content_hash) for r in rows}


def vectors_by_hash(session: Session, repo_id: int, hashes: Iterable[str]) -> dict[str, np.ndarray]:
    """Vectors already computed for these contents anywhere in the repository (a moved or copied
    function is not embedded again)."""
    wanted = list(set(hashes))
    if not wanted:
        return {}
    rows = session.execute(select(CodeChunk.content_hash, CodeChunk.embedding)
                           .where(CodeChunk.repo_id == repo_id, CodeChunk.content_hash.in_(wanted))
                           .ext(distinct_on(CodeChunk.content_hash)))
    return {r.content_hash: np.asarray(r.embedding, dtype=np.float32) for r in rows}


def _upsert_file(session: Session, repo_id: int, path: str, owner: str, values: Mapping[str, object]) -> None:
    row = {"repo_id": repo_id, "path": path, "owner": owner, **values, "indexed_at": datetime.now(UTC)}
    stmt = insert(IndexedFile).values(**row)
    key = ("repo_id", "path", "owner")
    stmt = stmt.on_conflict_do_update(index_elements=list(key), set_={k: stmt.excluded[k] for k in row if k not in key})
    session.execute(stmt)


def replace_file_chunks(
    session: Session,
    repo_id: int,
    path: str,
    *,
    language: str,
    content_hash: str,
    size_bytes: int,
    imports: list[str],
    module_keys: list[str],
    chunks: Sequence[ChunkRow],
    source_seq: int | None = None,
    edited_at: datetime | None = None,
    owner: str = SHARED,
) -> tuple[int, int]:
    """Make ``owner``'s index of ``path`` hold exactly ``chunks``; returns (inserted, deleted)."""
    keys = {(c.symbol, c.content_hash) for c in chunks}
    existing = chunk_keys(session, repo_id, path, owner)
    stale = existing - keys
    deleted = 0
    if stale:
        deleted = session.execute(delete(CodeChunk).where(
            CodeChunk.repo_id == repo_id, CodeChunk.path == path, CodeChunk.owner == owner,
            tuple_(CodeChunk.symbol, CodeChunk.content_hash).in_(list(stale)),
        )).rowcount or 0
    fresh = [c for c in chunks if (c.symbol, c.content_hash) not in existing]
    if fresh:
        session.execute(insert(CodeChunk).on_conflict_do_nothing(constraint="code_chunks_identity"), [
            {"repo_id": repo_id, "path": path, "owner": owner, "symbol": c.symbol, "kind": c.kind,
             "language": c.language, "start_line": c.start_line, "end_line": c.end_line,
             "signature": c.signature, "content": c.content, "content_hash": c.content_hash,
             "name_lexemes": c.name_lexemes, "lexemes": c.lexemes,
             "embedding": c.embedding}
            for c in fresh
        ])
    # Line numbers of unchanged chunks move when code above them changes (one batched statement).
    kept = [{"k_symbol": c.symbol, "k_hash": c.content_hash, "k_start": c.start_line, "k_end": c.end_line}
            for c in chunks if (c.symbol, c.content_hash) in existing]
    if kept:
        table = CodeChunk.__table__
        session.execute(
            table.update().where(
                table.c.repo_id == repo_id, table.c.path == path, table.c.owner == owner,
                table.c.symbol == bindparam("k_symbol"),
                table.c.content_hash == bindparam("k_hash"),
                (table.c.start_line != bindparam("k_start")) | (table.c.end_line != bindparam("k_end")),
            ).values(start_line=bindparam("k_start"), end_line=bindparam("k_end")),
            kept,
        )
    values: dict[str, object] = {
        "language": language, "content_hash": content_hash, "size_bytes": size_bytes, "imports": imports,
        "module_keys": module_keys, "chunk_count": len(chunks), "skipped_reason": None, "deleted": False,
    }
    if source_seq is not None:
        values["source_seq"] = source_seq
    if edited_at is not None:
        values["edited_at"] = edited_at
    _upsert_file(session, repo_id, path, owner, values)
    return len(fresh), deleted


def remove_file(session: Session, repo_id: int, path: str, *, reason: str | None = None,
                source_seq: int | None = None, owner: str = SHARED) -> int:
    """Drop a path's chunks. The file row stays (deleted, or skipped with ``reason``) to keep its
    stream sequence; returns the number of chunks removed."""
    removed = session.execute(delete(CodeChunk).where(CodeChunk.repo_id == repo_id, CodeChunk.path == path,
                                                      CodeChunk.owner == owner)).rowcount
    values: dict[str, object] = {"deleted": reason is None, "skipped_reason": reason, "chunk_count": 0,
                                 "content_hash": None, "imports": [], "module_keys": []}
    if source_seq is not None:
        values["source_seq"] = source_seq
    _upsert_file(session, repo_id, path, owner, values)
    return removed or 0


def discard_saved(session: Session, repo_id: int, paths: Iterable[str], owner: str) -> int:
    """Forget ``owner``'s saved versions of ``paths`` (a commit of theirs now holds them in the shared index);
    returns the number of chunks removed."""
    wanted = list(paths)
    if owner == SHARED or not wanted:
        return 0
    removed = session.execute(delete(CodeChunk).where(CodeChunk.repo_id == repo_id, CodeChunk.owner == owner,
                                                      CodeChunk.path.in_(wanted))).rowcount or 0
    session.execute(delete(IndexedFile).where(IndexedFile.repo_id == repo_id, IndexedFile.owner == owner,
                                              IndexedFile.path.in_(wanted)))
    return removed


def set_repository_head(session: Session, repo_id: int, commit: str | None, embedder: str) -> None:
    values: dict[str, object] = {"indexed_at": datetime.now(UTC), "embedder": embedder}
    if commit:
        values["head_commit"] = commit
    session.execute(Repository.__table__.update().where(Repository.id == repo_id).values(**values))


# ---------------------------------------------------------------------------------------------
# Search


def _scoped(stmt: Select, repositories: Sequence[str], viewer: str | None) -> Select:
    if not repositories:
        raise ScopeError("no readable repository given: refusing an unscoped search")
    stmt = stmt.join(Repository, Repository.id == CodeChunk.repo_id).where(Repository.name.in_(list(repositories)))
    return stmt.where(_visible(CodeChunk.repo_id, CodeChunk.path, CodeChunk.owner, viewer))


def _visible(repo_id: Any, path: Any, owner: Any, viewer: str | None) -> ColumnElement[bool]:
    """The rows ``viewer`` reads: their own saves, and the shared index's files they have not saved."""
    if viewer is None or viewer == SHARED:
        return owner == SHARED  # type: ignore[no-any-return]
    saved = aliased(IndexedFile)
    own_version = exists().where(saved.repo_id == repo_id, saved.path == path, saved.owner == viewer)
    return or_(owner == viewer, and_(owner == SHARED, ~own_version))


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
            score=fused[chunk_id], similarity=similarity.get(chunk_id), lexical_rank=lexical.get(chunk_id),
            found_by=[side for side, ranked in (("vector", similarity), ("lexical", lexical)) if chunk_id in ranked],
            imports=list(imports or []),
        ))
    return hits


@dataclass
class CoarseFiles:
    """The file-level filter of a request, each path with why it was chosen."""

    reasons: dict[str, list[str]] = field(default_factory=dict)

    def add(self, path: str, reason: str) -> None:
        self.reasons.setdefault(path, [])
        if reason not in self.reasons[path]:
            self.reasons[path].append(reason)

    @property
    def paths(self) -> list[str]:
        return list(self.reasons)


def coarse_files(
    session: Session,
    repositories: Sequence[str],
    *,
    path: str,
    imports: Sequence[str],
    module_keys: Sequence[str],
    recent_limit: int = 20,
    folder_limit: int = 50,
    viewer: str | None = None,
) -> CoarseFiles:
    """Files near ``path``: the same folder, the files it imports, the files importing it, and the
    repository's most recently edited files, as ``viewer`` sees the index (None: the shared index)."""
    if not repositories:
        raise ScopeError("no readable repository given: refusing an unscoped search")
    base = (select(IndexedFile.path).join(Repository, Repository.id == IndexedFile.repo_id)
            .where(Repository.name.in_(list(repositories)), IndexedFile.deleted.is_(False),
                   IndexedFile.chunk_count > 0, IndexedFile.path != path,
                   _visible(IndexedFile.repo_id, IndexedFile.path, IndexedFile.owner, viewer)))
    out = CoarseFiles()
    if imports:
        for (p,) in session.execute(base.where(IndexedFile.module_keys.overlap(list(imports))).limit(folder_limit)):
            out.add(p, "imported")
    if module_keys:
        for (p,) in session.execute(base.where(IndexedFile.imports.overlap(list(module_keys))).limit(folder_limit)):
            out.add(p, "imports this file")
    folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    same_folder = base.where(IndexedFile.path.like(like_literal(folder) + "%"),
                             ~IndexedFile.path.like(like_literal(folder) + "%/%"))
    for (p,) in session.execute(same_folder.limit(folder_limit)):
        out.add(p, "same folder")
    recent = base.where(IndexedFile.edited_at.is_not(None)).order_by(IndexedFile.edited_at.desc()).limit(recent_limit)
    for (p,) in session.execute(recent):
        out.add(p, "recently edited")
    return out


def like_literal(text: str) -> str:
    """``text`` matched literally in a LIKE pattern. The escape character (backslash, PostgreSQL's default)
    first: a folder named ``a\\b`` would otherwise match ``ab``, and one ending in a backslash escape the ``%``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
