"""Index a whole repository, or a set of changed files, into PostgreSQL.

Three stages: cut files into chunks (tree-sitter, this process), embed the chunks whose (symbol,
content hash) the index does not hold yet (Triton), write (one transaction). Nothing is written
before every file has been cut and every vector computed, so a failure (embedder down, database
error, Ctrl-C) leaves the index exactly as it was: no partial index.

Idempotent by construction: an unchanged file is recognised by its content hash and costs one
lookup; an unchanged function inside a changed file keeps its row and its vector. Events from the
stream carry their stream sequence, and a file never goes back to an older sequence, so a message
redelivered after a newer one was applied changes nothing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from ctxpress_core import inference
from ctxpress_core.repository_name import repository_name
from ctxpress_core.wire.v1 import MAX_INDEX_PATH_BYTES
from db import chunks as store
from db.scope import SHARED
from db.session import engine_for
from indexer.chunks import Chunk, ChunkingError, FileChunks, chunk_file
from indexer.embedder import Embedder
from indexer.filters import DEFAULT_MAX_FILE_BYTES
from indexer.secret_scan import TooLargeToScan, drop_secret_chunks
from indexer.walk import (
    THROUGH_SYMLINK,
    Skipped,
    SourceFile,
    changed_paths,
    classify,
    head_commit,
    index_root,
    is_work_tree_root,
    iter_files,
    list_paths,
    outside,
)

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class FileChange:
    """The new state of one path. ``text`` None: the file is gone (deleted, or renamed away)."""

    path: str
    text: str | None
    skipped: str | None = None  # the publisher did not send the content, and why
    seq: int | None = None  # stream sequence of the event that carried it
    edited: bool = True  # counts as a recent edit for retrieval's coarse filter


@dataclass
class IndexSummary:
    repository: str
    files_seen: int = 0
    files_indexed: int = 0  # changed or new, written
    files_unchanged: int = 0
    files_removed: int = 0  # deleted, or newly skipped, with chunks dropped
    chunks_written: int = 0
    chunks_deleted: int = 0
    chunks_total: int = 0  # chunks of the files indexed (written or kept)
    vectors_computed: int = 0
    vectors_reused: int = 0
    stale_events: int = 0  # older than what the index already holds
    skipped: list[Skipped] = field(default_factory=list)
    secret_chunks: list[str] = field(default_factory=list)  # held back: "path:symbol: kind, line N", no value
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def skipped_by_reason(self) -> Counter[str]:
        return Counter(s.reason.split(" at line")[0] for s in self.skipped)

    def as_dict(self) -> dict[str, object]:
        return {
            "repository": self.repository, "files_seen": self.files_seen, "files_indexed": self.files_indexed,
            "files_unchanged": self.files_unchanged, "files_removed": self.files_removed,
            "chunks_written": self.chunks_written, "chunks_deleted": self.chunks_deleted,
            "chunks_total": self.chunks_total, "vectors_computed": self.vectors_computed,
            "vectors_reused": self.vectors_reused, "stale_events": self.stale_events,
            "skipped": dict(self.skipped_by_reason()),
            "skipped_files": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "secret_chunks": len(self.secret_chunks), "secret_chunks_held": self.secret_chunks,
            "seconds": round(self.seconds, 3),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
        }


@dataclass
class _Planned:
    change: FileChange
    chunks: FileChunks | None  # None: remove the path
    reason: str | None = None  # why removed (skip reason), None for a deletion
    size: int = 0


def _removals(latest: dict[str, FileChange], known: dict[str, store.FileRow],
              summary: IndexSummary) -> list[_Planned]:
    """What a full index removes beyond the changes: the files newly skipped, with why, and the files
    gone from the repository."""
    plans: list[_Planned] = []
    present = set(latest)
    skipped = {s.path: s.reason for s in summary.skipped if s.reason != "unsupported language"}
    for path, reason in skipped.items():
        # Record why a file of a language we index stays out (broken, generated, too large), and
        # drop its chunks if it was indexed before.
        row = known.get(path)
        if row is None or row.skipped_reason != reason:
            plans.append(_Planned(FileChange(path, None, edited=False), None, reason))
    for path, row in known.items():
        if path not in present and path not in skipped and not row.deleted:
            plans.append(_Planned(FileChange(path, None, edited=False), None))  # gone from the repository
    return plans


class Indexer:
    def __init__(self, database_url: str, embedder: Embedder,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.database_url = database_url
        self.embedder = embedder
        self.max_file_bytes = max_file_bytes

    # -- entry points -------------------------------------------------------------------------

    def index_repository(self, root: str | Path, name: str | None = None,
                         progress: Progress | None = None) -> IndexSummary:
        """Index every file of the repository at ``root``; files gone from it leave the index."""
        top = index_root(root)
        name = name or repository_name(top)
        paths = list_paths(top)
        changes: list[FileChange] = []
        summary = IndexSummary(repository=name)
        for item in iter_files(top, paths, self.max_file_bytes):
            if isinstance(item, SourceFile):
                changes.append(FileChange(item.path, item.text, edited=False))
            else:
                summary.skipped.append(item)
        return self._run(name, changes, summary, root=str(top), commit=head_commit(top), full=True,
                         progress=progress)

    def index_changed(self, root: str | Path, name: str | None = None,
                      progress: Progress | None = None) -> IndexSummary:
        """Index only what git says changed since the last indexed commit (and the uncommitted work)."""
        top = index_root(root)
        if not is_work_tree_root(top) or head_commit(top) is None:  # not git's own: nothing says what changed
            return self.index_repository(top, name, progress)
        name = name or repository_name(top)
        with Session(engine_for(self.database_url)) as session:
            repo = store.find_repository(session, name)
            since = repo.head_commit if repo else None
        changes: list[FileChange] = []
        listed = set(list_paths(top))  # what git lists now: a changed path it no longer lists is gone, never read
        for path in changed_paths(top, since):
            full = top / path
            if outside(top, path):  # through a symlinked folder: not the repository's (see walk.outside)
                changes.append(FileChange(path, None, skipped=THROUGH_SYMLINK))
            elif path in listed and full.is_file() and not full.is_symlink():
                try:
                    data = full.read_bytes()
                except OSError as exc:
                    changes.append(FileChange(path, None, skipped=f"unreadable: {exc.strerror or exc}"))
                    continue
                try:
                    changes.append(FileChange(path, data.decode("utf-8")))
                except UnicodeDecodeError:
                    changes.append(FileChange(path, None, skipped="binary"))
            else:
                changes.append(FileChange(path, None))
        return self._run(name, changes, IndexSummary(repository=name), root=str(top), commit=head_commit(top),
                         progress=progress)

    def apply_changes(self, name: str, changes: Sequence[FileChange], commit: str | None = None,
                      progress: Progress | None = None, *, owner: str = SHARED,
                      committed_by: str | None = None) -> IndexSummary:
        """Index the given file states (from the stream: hooks and IDE saves) into ``owner``'s index (a user's
        saves in team mode) or the shared one. ``committed_by``: the user whose commit this is; their saved
        versions of these paths are dropped, the shared index now holding what they committed."""
        return self._run(name, list(changes), IndexSummary(repository=name), commit=commit, progress=progress,
                         owner=owner, committed_by=committed_by)

    # -- the three stages -------------------------------------------------------------------------

    def _run(self, name: str, changes: list[FileChange], summary: IndexSummary, *, root: str | None = None,
             commit: str | None = None, full: bool = False, progress: Progress | None = None,
             owner: str = SHARED, committed_by: str | None = None) -> IndexSummary:
        started = time.perf_counter()
        summary.files_seen = len(changes) + len(summary.skipped)
        # Later changes of the same path win (coalescing: a burst is one pass per file).
        latest: dict[str, FileChange] = {}
        for change in changes:
            latest.pop(change.path, None)
            latest[change.path] = change
        engine = engine_for(self.database_url)
        with Session(engine) as session:
            repo = store.find_repository(session, name)
            # A full index compares against every row; a change set only needs its own paths.
            known = store.file_rows(session, repo.id, None if full else list(latest), owner) if repo else {}
        plans = self._plan_changes(latest, known, summary, progress)
        if full:
            plans += _removals(latest, known, summary)
        vectors = self._vectors(name, plans, summary, progress)
        self._write(engine, name, plans, vectors, summary, root=root, commit=commit, full=full, progress=progress,
                    owner=owner, committed=list(latest) if committed_by else [], committed_by=committed_by)
        summary.seconds = time.perf_counter() - started
        return summary

    def _plan_changes(self, latest: dict[str, FileChange], known: dict[str, store.FileRow], summary: IndexSummary,
                      progress: Progress | None) -> list[_Planned]:
        """Cut each changed file into chunks; an event older than the index's row of its path is stale."""
        plans: list[_Planned] = []
        t = time.perf_counter()
        for n, change in enumerate(latest.values(), 1):
            row = known.get(change.path)
            if change.seq is not None and row is not None and row.source_seq >= change.seq:
                summary.stale_events += 1
            else:
                plan = self._plan(change, row, summary)
                if plan is not None:
                    plans.append(plan)
            if progress:
                progress("parsing", n, len(latest))
        summary.stage_seconds["parse"] = time.perf_counter() - t
        return plans

    def _write(self, engine: Engine, name: str, plans: list[_Planned], vectors: dict[str, np.ndarray],
               summary: IndexSummary, *, root: str | None, commit: str | None, full: bool,
               progress: Progress | None, owner: str = SHARED, committed: Sequence[str] = (),
               committed_by: str | None = None) -> None:
        """Write every plan in one transaction, under the repository's lock."""
        t = time.perf_counter()
        now = datetime.now(UTC)
        with Session(engine) as session, session.begin():
            store.lock_repository(session, name)
            repo = store.ensure_repository(session, name, root)
            # Re-read under the lock: another writer may have applied a newer event meanwhile.
            current = store.file_rows(session, repo.id, [p.change.path for p in plans], owner)
            for n, plan in enumerate(plans, 1):
                change = plan.change
                row = current.get(change.path)
                if change.seq is not None and row is not None and row.source_seq >= change.seq:
                    summary.stale_events += 1
                    continue
                if plan.chunks is None:
                    if row is None and plan.reason is None:
                        continue  # deleting what was never indexed
                    removed = store.remove_file(session, repo.id, change.path, reason=plan.reason,
                                                source_seq=change.seq, owner=owner)
                    summary.chunks_deleted += removed
                    if removed or (row is not None and not row.deleted and row.skipped_reason is None):
                        summary.files_removed += 1
                    continue
                fc = plan.chunks
                rows = [_row(c, vectors[c.content_hash]) for c in fc.chunks]
                inserted, deleted = store.replace_file_chunks(
                    session, repo.id, change.path, language=fc.language, content_hash=fc.content_hash,
                    size_bytes=plan.size, imports=fc.imports, module_keys=fc.module_keys, chunks=rows,
                    source_seq=change.seq, edited_at=now if change.edited else None, owner=owner,
                )
                summary.chunks_written += inserted
                summary.chunks_deleted += deleted
                summary.files_indexed += 1
                if progress:
                    progress("writing", n, len(plans))
            if committed_by is not None:
                summary.chunks_deleted += store.discard_saved(session, repo.id, committed, committed_by)
            # a user's version equal to the shared one is no longer theirs to keep: the shared index took it, or
            # they wrote what it holds
            summary.chunks_deleted += store.drop_copies_of_shared(
                session, repo.id, [p.change.path for p in plans], None if owner == SHARED else owner)
            if (full or commit) and owner == SHARED:
                store.set_repository_head(session, repo.id, commit, inference.EMBEDDING_MODEL_ID)
        summary.stage_seconds["write"] = time.perf_counter() - t

    def _plan(self, change: FileChange, row: store.FileRow | None, summary: IndexSummary) -> _Planned | None:
        def skipped(reason: str) -> _Planned:
            """The path's chunks are removed, with why it is skipped."""
            summary.skipped.append(Skipped(change.path, reason))
            return _Planned(change, None, reason)

        if _too_long(change.path):  # no row can name it (a walk of the disk finds such paths; events are refused)
            summary.skipped.append(Skipped(change.path, f"a path longer than {MAX_INDEX_PATH_BYTES} bytes"))
            return None
        if change.text is None:
            if change.skipped:
                summary.skipped.append(Skipped(change.path, change.skipped))
            return _Planned(change, None, change.skipped)
        data = change.text.encode("utf-8")
        item = classify(change.path, data, self.max_file_bytes)
        if isinstance(item, Skipped):
            summary.skipped.append(item)
            if item.reason == "unsupported language" and row is None:
                return None
            return _Planned(change, None, item.reason)
        try:
            fc = chunk_file(item.path, item.text, item.language)
        except ChunkingError as exc:
            return skipped(str(exc))
        except (RecursionError, ValueError, UnicodeError) as exc:
            # one pathological file (e.g. hundreds of nested namespaces) is skipped, not the whole batch:
            # a batch that fails is redelivered, and would fail again for ever
            return skipped(f"cannot be chunked: {type(exc).__name__}")
        if any(_too_long(name) for name in (*(c.symbol for c in fc.chunks), *fc.imports, *fc.module_keys)):
            # the database would refuse the whole batch's transaction for it, again at every try
            return skipped(f"a name longer than {MAX_INDEX_PATH_BYTES} bytes")
        try:  # a chunk holding a secret is neither embedded nor stored
            fc.chunks, held = drop_secret_chunks(item.path, item.text, fc.chunks)
        except TooLargeToScan as exc:
            return skipped(f"cannot be checked for secrets: {exc}")
        summary.secret_chunks.extend(held)
        summary.chunks_total += len(fc.chunks)
        if row is not None and not row.deleted and row.content_hash == fc.content_hash and change.seq is None:
            summary.files_unchanged += 1
            return None  # same bytes as indexed: nothing to write
        return _Planned(change, fc, size=len(data))

    def _vectors(self, name: str, plans: list[_Planned], summary: IndexSummary,
                 progress: Progress | None) -> dict[str, np.ndarray]:
        """A vector for every chunk content of the plans: reused from the index when that exact content
        is already embedded in the repository (also under another path), computed otherwise."""
        t = time.perf_counter()
        wanted: dict[str, Chunk] = {}
        for plan in plans:
            if plan.chunks is not None:
                for c in plan.chunks.chunks:
                    wanted.setdefault(c.content_hash, c)
        vectors: dict[str, np.ndarray] = {}
        if wanted:
            with Session(engine_for(self.database_url)) as session:
                repo = store.find_repository(session, name)
                if repo is not None:
                    hashes = list(wanted)
                    for i in range(0, len(hashes), 5000):
                        vectors.update(store.vectors_by_hash(session, repo.id, hashes[i : i + 5000]))
        summary.vectors_reused = len(vectors)
        missing = [c for h, c in wanted.items() if h not in vectors]
        if missing:
            done = [0]

            def tick(n: int) -> None:
                done[0] += n
                if progress:
                    progress("embedding", done[0], len(missing))

            computed = self.embedder.embed([c.embedding_text() for c in missing], progress=tick)
            for c, v in zip(missing, computed, strict=True):
                vectors[c.content_hash] = v
        summary.vectors_computed = len(missing)
        summary.stage_seconds["embed"] = time.perf_counter() - t
        return vectors


def _too_long(name: str) -> bool:
    """Past what a btree entry of the index holds beside the other key columns (ctxpress_core.wire.v1)."""
    return len(name.encode("utf-8", "surrogatepass")) > MAX_INDEX_PATH_BYTES


def _row(c: Chunk, vector: np.ndarray) -> store.ChunkRow:
    return store.ChunkRow(
        symbol=c.symbol, kind=c.kind, language=c.language, start_line=c.start_line, end_line=c.end_line,
        signature=c.signature, content=c.content, content_hash=c.content_hash, name_lexemes=c.name_lexemes,
        lexemes=c.lexemes, embedding=vector,
    )
