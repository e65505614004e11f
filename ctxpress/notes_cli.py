"""``ctxpress notes``: write the index's pending model-written notes now (syntax/notes.py), through the running
appliance's engine, instead of waiting for the completion workers' idle time (``CTXPRESS_WRITE_NOTES``); or,
with ``--status``, count them."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from ctxpress.index_cli import _Progress
from ctxpress_core.settings import Settings

# SQLAlchemy's ORM, the Triton client and the workers' note writer are imported where they are used: `ctxpress`
# registers this command on every start, and importing them here cost every other command half a second.


def _counts(settings: Settings, repository: str | None) -> dict[str, int]:
    from sqlalchemy.orm import Session

    from db import notes as store
    from db.session import engine_for

    with Session(engine_for(settings.effective_database_url())) as session:
        return store.note_counts(session, repository)


async def _write(settings: Settings, repository: str | None, limit: int | None, progress: _Progress
                 ) -> dict[str, Any]:
    from sqlalchemy.orm import Session

    from db import notes as store
    from db.session import engine_for
    from serving.triton_client import TritonCompletionClient
    from workers.completion.notes import write_note

    url = settings.effective_database_url()
    total = _counts(settings, repository)["pending"]
    total = min(total, limit) if limit is not None else total
    engine = TritonCompletionClient(settings.effective_triton_url())
    written = unusable = 0
    started = time.perf_counter()
    try:
        for done in range(1, total + 1):
            with Session(engine_for(url)) as session, session.begin():
                pending = store.claim_pending(session, repository)
            if pending is None:
                break
            try:
                note = await write_note(engine, pending.language, pending.source, max_tokens=settings.notes_max_tokens)
            except BaseException:
                with Session(engine_for(url)) as session, session.begin():
                    store.release(session, pending)
                raise
            with Session(engine_for(url)) as session, session.begin():
                store.store_note(session, pending, note)
            written += note is not None
            unusable += note is None
            progress("notes", done, total)
    finally:
        await engine.close()
        progress.close()
    seconds = time.perf_counter() - started
    return {"written": written, "unusable": unusable, "seconds": round(seconds, 1),
            "seconds_per_note": round(seconds / max(written + unusable, 1), 2),
            **{f"now_{k}": v for k, v in _counts(settings, repository).items()}}


def _cmd_notes(args: argparse.Namespace, settings: Settings) -> int:
    if args.status:
        print(json.dumps(_counts(settings, args.repository)))
        return 0
    summary = asyncio.run(_write(settings, args.repository, args.limit, _Progress(enabled=not args.json)))
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"notes: {summary['written']} written, {summary['unusable']} unusable answers, "
              f"{summary['seconds']} s ({summary['seconds_per_note']} s a note); "
              f"{summary['now_written']} in the index, {summary['now_pending']} still wanted", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    notes = subparsers.add_parser("notes", help="write the model-written notes of opaque blocks now (docs/context.md)")
    notes.add_argument("--repository", help="only this indexed repository's blocks")
    notes.add_argument("--limit", type=int, help="write at most this many")
    notes.add_argument("--status", action="store_true", help="only count written and wanted notes")
    notes.add_argument("--json", action="store_true", help="print the summary as JSON, no progress bar")
    notes.set_defaults(func=_cmd_notes)
