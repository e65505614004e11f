"""Per-request telemetry rows in PostgreSQL, written off the hot path in batches.

A request only appends to an in-memory queue; a background task flushes it every
``flush_interval_s`` or ``batch_size`` rows through an executor. If the database is
down the rows wait (bounded) and are dropped, counted and logged beyond that bound:
telemetry must never slow down or fail a completion.

A row the database refuses (a value it cannot store) must not hold the others back: when a batch is refused
for its values, its rows are written one at a time and only the refused ones are dropped (counted and
logged). Retrying the whole batch would fail forever and stop all telemetry.

The backlog is shared by every user of the worker, so each user may hold at most ``user_backlog`` rows of it:
one user's flood (feedback spam while the database is slow) drops that user's own rows, never another's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from db.session import engine_for, refuses_values
from workers import metrics

log = logging.getLogger("ctxpress.worker.telemetry")

EVENT_COLUMNS = (
    "request_id", "repository", "path", "language", "mode", "scenario", "model", "outcome", "degraded_reason",
    "error_code", "strategy", "sources", "features", "file_tokens", "context_tokens", "prompt_tokens",
    "cached_tokens", "completion_tokens", "draft_tokens_proposed", "draft_tokens_accepted", "queue_ms",
    "context_ms", "prompt_ms", "decode_ms", "total_ms", "user_name", "restored_tokens", "restore_ms",
    "planned_budget_tokens",
)
_INSERT_EVENT = text(
    f"INSERT INTO completion_events ({', '.join(EVENT_COLUMNS)}) VALUES "
    f"({', '.join(':' + c if c != 'features' else 'CAST(:features AS jsonb)' for c in EVENT_COLUMNS)})"
)
_INSERT_FEEDBACK = text(
    "INSERT INTO completion_feedback (completion_id, action, chars_kept, user_name)"
    " VALUES (:completion_id, :action, :chars_kept, :user_name)"
)


class TelemetryWriter:
    def __init__(self, database_url: str, *, batch_size: int = 200, flush_interval_s: float = 0.5,
                 max_backlog: int = 20_000, user_backlog: int = 5_000) -> None:
        self.database_url = database_url
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.max_backlog = max_backlog
        self.user_backlog = user_backlog
        self._held: Counter[str | None] = Counter()  # the backlog's rows by user
        self._events: list[dict[str, Any]] = []
        self._feedback: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def record_event(self, row: dict[str, Any]) -> None:
        self._append(self._events, {c: row.get(c) for c in EVENT_COLUMNS})

    def record_feedback(self, row: dict[str, Any]) -> None:
        self._append(self._feedback, {"user_name": None, **row})

    def _append(self, rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
        user = row.get("user_name")
        if len(self._events) + len(self._feedback) >= self.max_backlog or self._held[user] >= self.user_backlog:
            metrics.TELEMETRY_DROPPED.inc()
            return
        self._held[user] += 1
        rows.append(row)
        if len(rows) >= self.batch_size:
            self._wake.set()

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.flush_interval_s)
            except TimeoutError:
                pass
            self._wake.clear()
            events, self._events = self._events, []
            feedback, self._feedback = self._feedback, []
            self._held.clear()  # the rows are the flush's now; those it gives back are counted again below
            if events or feedback:
                kept = await self._flush(events, feedback)
                if kept is not None:  # the database is unreachable: keep the rows for the next try
                    events, feedback, reason = kept
                    log.warning("telemetry write failed (%d rows kept for retry): %s", len(events) + len(feedback),
                                reason)
                    self._events[:0] = events
                    self._feedback[:0] = feedback
                    self._held.update(row.get("user_name") for row in (*events, *feedback))
                    if self._closing:
                        metrics.TELEMETRY_DROPPED.inc(len(events) + len(feedback))
                        return
                    await asyncio.sleep(1.0)
            if self._closing and not self._events and not self._feedback:
                return

    async def _flush(self, events: list[dict[str, Any]], feedback: list[dict[str, Any]]
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str] | None:
        """Write the rows; None when done, else the rows to try again (the database is unreachable) and why."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._write, events, feedback)
            return None
        except Exception as exc:  # never let the writer's task die: no telemetry would be written again
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if not refuses_values(exc):  # down, unreachable, or not about the rows: all of them later
                return events, feedback, reason
        # the database refused a row: write the others one by one, drop the refused ones
        events, feedback = await loop.run_in_executor(None, self._write_each, events, feedback)
        return (events, feedback, reason) if events or feedback else None

    def _write_each(self, events: Sequence[dict[str, Any]],
                    feedback: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Each row in its own transaction; a refused row is dropped. Returns the rows from the first one that
        failed for another reason (the database went away on the way), kept for the next retry."""
        pending = [(_INSERT_EVENT, row) for row in events] + [(_INSERT_FEEDBACK, row) for row in feedback]
        for i, (statement, row) in enumerate(pending):
            try:
                with engine_for(self.database_url).begin() as conn:
                    conn.execute(statement, [row])
            except Exception as exc:
                if not refuses_values(exc):
                    rest = pending[i:]
                    return [r for s, r in rest if s is _INSERT_EVENT], [r for s, r in rest if s is _INSERT_FEEDBACK]
                metrics.TELEMETRY_DROPPED.inc()
                # the id (escaped: it is the client's) says which request; the values themselves are not logged
                row_id = str(row.get("request_id") or row.get("completion_id") or "")[:128]
                log.warning("telemetry row dropped, the database refused it (%s, id %s): %s",
                            "completion_events" if statement is _INSERT_EVENT else "completion_feedback",
                            ascii(row_id), str(exc).splitlines()[0])
        return [], []

    def _write(self, events: Sequence[dict[str, Any]], feedback: Sequence[dict[str, Any]]) -> None:
        with engine_for(self.database_url).begin() as conn:
            if events:
                conn.execute(_INSERT_EVENT, list(events))
            if feedback:
                conn.execute(_INSERT_FEEDBACK, list(feedback))

