"""Writes of the repository index: repositories, files, and chunks upserted by their identity.

Chunk identity is (repository, path, owner, symbol, content hash): re-indexing an unchanged file
finds every key already present and writes nothing; a changed function adds one row and removes one.
Owners are ``db.scope``'s: ``SHARED`` or a user's name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import bindparam, delete, select, text, tuple_
from sqlalchemy.dialects.postgresql import distinct_on, insert
from sqlalchemy.orm import Session

from db.models import CodeChunk, IndexedFile, Repository
from db.scope import SHARED


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


def drop_copies_of_shared(session: Session, repo_id: int, paths: Iterable[str], owner: str | None = None) -> int:
    """Forget users' versions of ``paths`` that the shared index now holds as they are (same content, or deleted
    both): ``owner``'s only, or every user's (None). A developer's commit stays in their own view until a trusted
    source indexes the same content into the shared one. Returns the number of chunks removed."""
    wanted = list(paths)
    if not wanted or owner == SHARED:
        return 0
    gone = session.execute(text(
        "DELETE FROM indexed_files u USING indexed_files s"
        " WHERE u.repo_id = :r AND u.path = ANY(:paths) AND u.owner <> :shared"
        " AND (CAST(:owner AS text) IS NULL OR u.owner = :owner)"
        " AND s.repo_id = u.repo_id AND s.path = u.path AND s.owner = :shared AND s.deleted = u.deleted"
        " AND s.content_hash IS NOT DISTINCT FROM u.content_hash"
        " AND s.skipped_reason IS NOT DISTINCT FROM u.skipped_reason"
        " RETURNING u.path, u.owner"), {"r": repo_id, "paths": wanted, "owner": owner, "shared": SHARED}).all()
    removed = 0
    for path, user in gone:
        removed += session.execute(delete(CodeChunk).where(CodeChunk.repo_id == repo_id, CodeChunk.path == path,
                                                           CodeChunk.owner == user)).rowcount or 0
    return removed


def set_repository_head(session: Session, repo_id: int, commit: str | None, embedder: str) -> None:
    values: dict[str, object] = {"indexed_at": datetime.now(UTC), "embedder": embedder}
    if commit:
        values["head_commit"] = commit
    session.execute(Repository.__table__.update().where(Repository.id == repo_id).values(**values))
