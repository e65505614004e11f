"""The index worker: keeps the repository index fresh from the ``CTXPRESS_INDEX`` JetStream stream.

Git hooks publish ``ctxpress.v1.index.git`` events and IDEs ``ctxpress.v1.file_saved`` (in team mode
``ctxpress.v1.u.<user>.index_git`` and ``.file_saved``, applied only to a repository the user holds a grant for,
and into the shared index only from a hooks user; see ``IndexWorker.destination``); every
worker binds the same durable pull consumer, so they share the stream like a queue group. A
batch is what is pending when the worker looks (a burst, a rebase's files), folded to the latest
state of each path: one pass per file, not one per event. Messages are acked only after the
database commit; a crash leaves them unacked and JetStream redelivers them after ``ack_wait``.
Applying an event twice changes nothing (content hashes, and each file's last stream sequence).

Run several: ``python -m workers.index_worker``. SIGTERM finishes the batch in hand, then leaves.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from functools import partial

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import ValidationError

from ctxpress_core import nats_connect
from ctxpress_core.errors import Forbidden, GrantsUnavailable
from ctxpress_core.identity import INDEXER_USER, service_connect_options, subject_kind, subject_user, team_mode
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import (
    HEADER_DEAD_DELIVERIES,
    HEADER_DEAD_ERROR,
    HEADER_DEAD_SUBJECT,
    SUBJECT_FILE_SAVED,
    FileSaved,
    IndexEvent,
)
from db.scope import SHARED
from db.session import refuses_values
from indexer.pipeline import FileChange, Indexer, IndexSummary
from indexer.stream import (
    dead_letter_subject,
    dead_letters,
    ensure_stream,
    next_batch,
    retry_delay_s,
    users_at_quota,
)
from serving.triton_client import TritonEmbedder
from workers import replies
from workers.grants import Grants
from workers.process import run_service

log = logging.getLogger("ctxpress.worker.index")

IN_PROGRESS_EVERY_S = 3.0  # a long batch tells JetStream it is still alive
# Files whose passes the status keeps (the most passed, once past it): a long-lived worker sees every file of
# every repository, and the count per file is for checking coalescing, not an inventory.
MAX_TRACKED_FILES = 10_000


@dataclass
class Decoded:
    repository: str
    changes: list[FileChange]
    commit: str | None
    started_at: float | None  # when the hook ran / the IDE saved (epoch s), for freshness
    kind: str
    user: str | None = None  # team mode: whose subject a save or hook event came on (None: a user-less subject)
    trusted: bool = False  # team mode: published by a hooks user, whose commits the shared index takes


def decode(msg: Msg, seq: int) -> Decoded:
    """A stream message to the file states it carries; ``ValueError`` for a malformed one."""
    try:
        if msg.subject == SUBJECT_FILE_SAVED or subject_kind(msg.subject) == "file_saved":
            saved = FileSaved.model_validate_json(msg.data)
            return Decoded(saved.repository, [FileChange(saved.path, saved.text, seq=seq)], None, saved.saved_at,
                           "save", subject_user(msg.subject))
        event = IndexEvent.model_validate_json(msg.data)
    except ValidationError as exc:
        raise ValueError(f"invalid {msg.subject} message: {exc.errors()[0]['msg']}") from None
    changes: list[FileChange] = []
    for c in event.changes:
        if c.status == "R" and c.old_path:
            changes.append(FileChange(c.old_path, None, seq=seq))
        if c.status == "D":
            changes.append(FileChange(c.path, None, seq=seq))
        else:
            changes.append(FileChange(c.path, c.text, skipped=c.skipped if c.text is None else None, seq=seq))
    return Decoded(event.repository, changes, event.commit, event.published_at, event.hook, subject_user(msg.subject))


@dataclass
class WorkerStats:
    worker: str
    batches: int = 0
    events: int = 0
    invalid: int = 0
    forbidden: int = 0
    failures: int = 0
    refused: int = 0  # events the database would never take (terminated, see IndexWorker._failed)
    dead_lettered: int = 0  # events given up on, moved to the dead-letter stream
    files_indexed: int = 0
    file_passes: Counter[str] = field(default_factory=Counter)  # "repo:path" -> passes (coalescing check)
    stale_events: int = 0
    secret_chunks: int = 0  # chunks held back because they hold a secret (indexer/secret_scan.py)
    freshness_ms: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    last_error: str | None = None

    def as_dict(self) -> dict[str, object]:
        fresh = sorted(self.freshness_ms)
        return {
            "worker": self.worker, "batches": self.batches, "events": self.events, "invalid": self.invalid,
            "forbidden": self.forbidden, "failures": self.failures,
            "refused": self.refused, "dead_lettered": self.dead_lettered, "files_indexed": self.files_indexed,
            "stale_events": self.stale_events, "secret_chunks": self.secret_chunks,
            "max_passes_per_file": max(self.file_passes.values(), default=0),
            "file_passes": dict(self.file_passes.most_common(50)),
            "freshness_ms": {"n": len(fresh), "p50": fresh[len(fresh) // 2] if fresh else None,
                             "p95": fresh[min(len(fresh) - 1, int(len(fresh) * 0.95))] if fresh else None},
            "last_error": self.last_error,
        }


class IndexWorker:
    def __init__(self, settings: Settings, indexer: Indexer, grants: Grants | None = None,
                 js: JetStreamContext | None = None) -> None:
        self.settings = settings
        self.indexer = indexer
        self.js = js  # where events given up on go (the dead-letter stream); None: they are only logged
        self.dead_subject = dead_letter_subject(settings)  # team mode: keyed with this worker's own credential
        self.grants = grants  # team mode: an editor's save needs its user's grant for the repository
        self.stats = WorkerStats(worker=f"{os.uname().nodename}:{os.getpid()}")

    async def handle_batch(self, msgs: list[Msg]) -> None:
        """Apply one batch; ack after commit, nak (redeliver later) on failure."""
        self.stats.batches += 1
        by_repo: dict[tuple[str, str], list[tuple[int, Decoded, Msg]]] = {}
        good: list[Msg] = []
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            try:
                decoded = decode(msg, seq)
                # Team mode: a user's own saves and hook events need their grant; an event on a user-less subject
                # (left out of the stream, but there from before, or captured by an operator's stream) is refused.
                if self.grants is not None:
                    await self.grants.authorize(decoded.user, decoded.repository)
                    if decoded.kind != "save" and decoded.user is not None:
                        decoded.trusted = await self.grants.trusted_publisher(decoded.user)
            except ValueError as exc:
                self.stats.invalid += 1
                log.warning(json.dumps({"event": "invalid", "seq": seq, "subject": msg.subject, "error": str(exc)}))
                await msg.term()  # never redeliver what can never be read
                continue
            except Forbidden as exc:
                self.stats.forbidden += 1
                log.warning(json.dumps({"event": "forbidden", "seq": seq, "subject": msg.subject, "error": str(exc)}))
                await msg.term()
                continue
            except GrantsUnavailable as exc:
                log.warning(json.dumps({"event": "grants unavailable", "seq": seq, "error": str(exc)}))
                await self._retry_later(msg, seq, f"grants unavailable: {exc}")
                continue
            good.append(msg)
            by_repo.setdefault((decoded.repository, self.destination(decoded)), []).append((seq, decoded, msg))
        self.stats.events += len(good)
        keepalive = asyncio.create_task(self._keep_alive(good))
        try:
            for (repository, owner), items in by_repo.items():
                items.sort(key=lambda x: x[0])
                await self._apply_or_split(repository, owner, items)
        finally:
            keepalive.cancel()

    async def _apply_or_split(self, repository: str, owner: str, items: list[tuple[int, Decoded, Msg]]) -> None:
        """Apply ``items`` in one pass; when that fails, each half on its own, and so on down to the events that
        fail alone. One event the indexer cannot apply must not hold back the others (nak'd together, they came
        back and failed together until JetStream gave up on all of them), nor cost a pass per event: one bad
        event among n costs about 2·log2(n) more passes, not n."""
        try:
            await self._apply(repository, owner, items)
        except Exception as exc:
            if len(items) == 1:
                await self._failed(items[0], exc)
                return
            log.warning(json.dumps({"event": "batch failed", "repository": repository, "events": len(items),
                                    "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                                    "then": "each half on its own"}))
            middle = len(items) // 2
            await self._apply_or_split(repository, owner, items[:middle])
            await self._apply_or_split(repository, owner, items[middle:])
            return
        for _, _, msg in items:  # acked only after the commit
            await msg.ack()

    async def _apply(self, repository: str, owner: str, items: list[tuple[int, Decoded, Msg]]) -> None:
        changes = [c for _, d, _ in items for c in d.changes]
        commit = next((d.commit for _, d, _ in reversed(items) if d.commit), None)
        summary: IndexSummary = await asyncio.get_running_loop().run_in_executor(
            None, partial(self.indexer.apply_changes, repository, changes, commit, owner=owner))
        done = time.time()
        self.stats.files_indexed += summary.files_indexed
        self.stats.stale_events += summary.stale_events
        self.stats.secret_chunks += len(summary.secret_chunks)
        for path in {c.path for c in changes}:
            self.stats.file_passes[f"{repository}:{path}"] += 1
        if len(self.stats.file_passes) > MAX_TRACKED_FILES:
            self.stats.file_passes = Counter(dict(self.stats.file_passes.most_common(MAX_TRACKED_FILES // 2)))
        for _, d, _ in items:
            if d.started_at:
                self.stats.freshness_ms.append((done - d.started_at) * 1000)
        log.info(json.dumps({"event": "indexed", "repository": repository, "events": len(items),
                             "paths": len({c.path for c in changes}), "files": summary.files_indexed,
                             "chunks_written": summary.chunks_written,
                             "chunks_deleted": summary.chunks_deleted, "stale": summary.stale_events,
                             "skipped": dict(summary.skipped_by_reason()),
                             "secret_chunks": summary.secret_chunks,
                             "ms": round(summary.seconds * 1000, 1)}))

    async def _failed(self, item: tuple[int, Decoded, Msg], exc: Exception) -> None:
        """One event that could not be applied alone: dropped when the database refuses its values (it never
        will take them), else redelivered later (the embedder or the database may be back by then)."""
        seq, _, msg = item
        self.stats.failures += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        if refuses_values(exc):
            self.stats.refused += 1
            log.error(json.dumps({"event": "refused", "seq": seq, "subject": msg.subject, "error": why}))
            await self._dead_letter(msg, seq, f"refused by the database: {why}")
            return
        log.error("event %d failed; it will be redelivered", seq, exc_info=exc)
        await self._retry_later(msg, seq, why)

    async def _retry_later(self, msg: Msg, seq: int, why: str) -> None:
        """Redelivered after a delay doubling with each try, so that an outage of the database or the embedder
        outlasts no event; past the last try, to the dead-letter stream."""
        delivered = msg.metadata.num_delivered or 1
        if delivered >= self.settings.index_max_deliver:
            await self._dead_letter(msg, seq, why)
            return
        await msg.nak(delay=retry_delay_s(self.settings, delivered))

    async def _dead_letter(self, msg: Msg, seq: int, why: str) -> None:
        """Kept, with its subject and the reason, in the dead-letter stream (``ctxpress status`` counts them), and
        taken off the index stream. When even that fails the event stays where it is."""
        delivered = msg.metadata.num_delivered or 1
        headers = {HEADER_DEAD_SUBJECT: msg.subject, HEADER_DEAD_DELIVERIES: str(delivered),
                   HEADER_DEAD_ERROR: " ".join(why.split())[:500]}
        try:
            if self.js is None:
                raise RuntimeError("no JetStream context")
            await self.js.publish(self.dead_subject, msg.data, headers=headers, timeout=5)
        except Exception as exc:
            log.error(json.dumps({"event": "dead letter failed", "seq": seq, "error": f"{type(exc).__name__}: {exc}"}))
            await msg.nak(delay=self.settings.index_retry_max_s)
            return
        self.stats.dead_lettered += 1
        log.error(json.dumps({"event": "dead letter", "seq": seq, "subject": msg.subject, "deliveries": delivered,
                              "error": headers[HEADER_DEAD_ERROR]}))
        await msg.term()

    def destination(self, decoded: Decoded) -> str:
        """The index an event is written into. In team mode a user's save goes into that user's own index, read
        only by their retrieval: a colleague's prompts see what was committed, never what someone saved. So does a
        developer's commit event: nothing ties it to a real commit (anyone can publish a hand-made one on their
        own subject), so it shapes only their own prompts until a trusted publisher (a hooks user: CI, the
        canonical server) indexes the same content into the shared index. Only a trusted publisher's event sets
        the repository's head (a user's index never does), so ``ctxpress index --changed`` stays right."""
        if self.grants is None or decoded.user is None or (decoded.kind != "save" and decoded.trusted):
            return SHARED
        return decoded.user

    async def _keep_alive(self, msgs: list[Msg]) -> None:
        while True:
            await asyncio.sleep(IN_PROGRESS_EVERY_S)
            for msg in msgs:
                await msg.in_progress()


async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    connect_options = service_connect_options(settings, INDEXER_USER)  # team mode: no start without its credential
    embedder = TritonEmbedder(settings.effective_triton_url())
    indexer = Indexer(settings.effective_database_url(), embedder, settings.index_max_file_bytes)
    grants = Grants(settings.effective_database_url()) if team_mode(settings) else None
    worker = IndexWorker(settings, indexer, grants)
    # plain text only where CTXPRESS_NATS_TLS=false says so (ctxpress_core.nats_connect)
    nc = await nats_connect.connect(settings.nats_servers(), name="ctxpress-index-worker", max_reconnect_attempts=-1,
                                    plaintext_credentials=not settings.nats_tls, **connect_options)
    js = nc.jetstream()
    await ensure_stream(js, settings)
    worker.js = js
    sub = await js.pull_subscribe_bind(settings.index_consumer, settings.index_stream)

    async def on_status(msg: Msg) -> None:
        if not msg.reply or not replies.answerable(msg, team=grants is not None, service="index-worker"):
            return
        try:
            dead = await dead_letters(js, settings)
        except Exception as exc:  # the status still answers: the count is what is missing
            log.warning("cannot count the dead letters: %s", exc)
            dead = None
        try:
            at_quota: dict[str, int] | None = await users_at_quota(js, settings)
        except Exception as exc:
            log.warning("cannot read the per-user counts of the index stream: %s", exc)
            at_quota = None
        await msg.respond(json.dumps({**worker.stats.as_dict(), "dead_letters": dead,
                                      "users_at_quota": at_quota}).encode())

    status_sub = await nc.subscribe(settings.index_status_subject, cb=on_status)
    log.info("index worker on stream %s (consumer %s), Triton at %s", settings.index_stream,
             settings.index_consumer, settings.effective_triton_url())
    while not stop.is_set():
        msgs = await next_batch(sub)
        if msgs:
            await worker.handle_batch(msgs)
    await status_sub.unsubscribe()
    await sub.unsubscribe()
    await nc.drain()
    embedder.close()
    log.info("index worker stopped")


def main() -> int:
    return run_service(run_worker)


if __name__ == "__main__":
    raise SystemExit(main())
