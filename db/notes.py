"""Model-written notes of opaque blocks (syntax/notes.py) in the index: asked for by the indexer, one row a
block with no note yet; claimed and written by a completion worker in idle engine time; read by the worker
for the file of a request.

Only the shared index asks for notes: a user's saved, uncommitted files (team mode) are not sent to a table
that every worker reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

# A row whose writer went away (its process stopped mid-note) is offered again after this.
CLAIM_EXPIRES = "10 minutes"
# A block whose answers were unusable this many times is left without a note.
MAX_TRIES = 3


@dataclass(frozen=True)
class WantedNote:
    note_key: str
    language: str
    source: str  # what the model reads (syntax.notes.note_source)


@dataclass(frozen=True)
class PendingNote:
    repo_id: int
    path: str
    note_key: str
    language: str
    source: str


def want_notes(session: Session, repo_id: int, path: str, wanted: Sequence[WantedNote]) -> int:
    """The notes ``path``'s current version wants: rows of blocks gone or changed are removed, new ones added
    (with the note already written for the same text elsewhere in the repository, if any). Returns the rows
    added."""
    keys = [w.note_key for w in wanted]
    session.execute(text("DELETE FROM block_notes WHERE repo_id = :r AND path = :p AND NOT (note_key = ANY(:keys))"),
                    {"r": repo_id, "p": path, "keys": keys})
    if not wanted:
        return 0
    stmt = text(
        "INSERT INTO block_notes (repo_id, path, note_key, language, source, note, written_at)"
        " SELECT :r, :p, :k, :lang, :src, n.note, n.written_at FROM (SELECT 1) AS one LEFT JOIN LATERAL"
        " (SELECT note, written_at FROM block_notes WHERE repo_id = :r AND note_key = :k AND note IS NOT NULL"
        "  LIMIT 1) AS n ON true"
        " ON CONFLICT (repo_id, path, note_key) DO NOTHING")
    added = 0
    for w in wanted:
        result = session.execute(stmt, {"r": repo_id, "p": path, "k": w.note_key, "lang": w.language,
                                        "src": w.source})
        added += result.rowcount or 0  # type: ignore[attr-defined]
    return added


def forget_notes(session: Session, repo_id: int, path: str) -> None:
    """A file removed from the index takes its notes with it."""
    session.execute(text("DELETE FROM block_notes WHERE repo_id = :r AND path = :p"), {"r": repo_id, "p": path})


def claim_pending(session: Session, repository: str | None = None) -> PendingNote | None:
    """One block still without a note (of ``repository``, or any), held for this writer (``CLAIM_EXPIRES``);
    None when there is none."""
    row = session.execute(text(
        "UPDATE block_notes SET tries = tries + 1, claimed_at = now()"
        " WHERE (repo_id, path, note_key) = (SELECT repo_id, path, note_key FROM block_notes"
        "  WHERE note IS NULL AND tries < :max"
        f"  AND (claimed_at IS NULL OR claimed_at < now() - interval '{CLAIM_EXPIRES}')"
        "  AND (CAST(:repo AS text) IS NULL OR repo_id = (SELECT id FROM repositories WHERE name = :repo))"
        "  ORDER BY repo_id, path, note_key LIMIT 1 FOR UPDATE SKIP LOCKED)"
        " RETURNING repo_id, path, note_key, language, source"), {"max": MAX_TRIES, "repo": repository}).first()
    return PendingNote(row.repo_id, row.path, row.note_key, row.language, row.source) if row else None


def release(session: Session, pending: PendingNote) -> None:
    """Give a claimed block back untried (its writer was interrupted by a request, not given a bad answer)."""
    session.execute(text("UPDATE block_notes SET tries = greatest(tries - 1, 0), claimed_at = NULL"
                         " WHERE repo_id = :r AND path = :p AND note_key = :k"),
                    {"r": pending.repo_id, "p": pending.path, "k": pending.note_key})


def store_note(session: Session, pending: PendingNote, note: str | None) -> None:
    """The note written for a claimed block, on every row of the same text in the repository; None: the answer
    was unusable (the block is offered again until ``MAX_TRIES``)."""
    if note is None:
        session.execute(text("UPDATE block_notes SET claimed_at = NULL"
                             " WHERE repo_id = :r AND path = :p AND note_key = :k"),
                        {"r": pending.repo_id, "p": pending.path, "k": pending.note_key})
        return
    session.execute(text("UPDATE block_notes SET note = :n, written_at = now(), claimed_at = NULL"
                         " WHERE repo_id = :r AND note_key = :k"),
                    {"r": pending.repo_id, "k": pending.note_key, "n": note})


def notes_for_file(session: Session, repository: str, path: str) -> dict[str, str]:
    """The notes written for ``path``'s blocks, by note key."""
    rows = session.execute(text(
        "SELECT n.note_key, n.note FROM block_notes n JOIN repositories r ON r.id = n.repo_id"
        " WHERE r.name = :repo AND n.path = :p AND n.note IS NOT NULL"), {"repo": repository, "p": path})
    return {r.note_key: r.note for r in rows}


def note_counts(session: Session, repository: str | None = None) -> dict[str, int]:
    """Blocks with a note written, and blocks still waiting for one (all repositories, or one)."""
    stmt = text(
        "SELECT count(n.note) AS written, count(*) FILTER (WHERE n.note IS NULL AND n.tries < :max) AS pending"
        " FROM block_notes n JOIN repositories r ON r.id = n.repo_id"
        " WHERE (CAST(:repo AS text) IS NULL OR r.name = :repo)")
    row = session.execute(stmt, {"max": MAX_TRIES, "repo": repository}).one()
    return {"written": int(row.written), "pending": int(row.pending)}
