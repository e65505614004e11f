"""The index events the index worker gave up on (the dead-letter stream, ``indexer.stream``): listed with their
reason, retried or discarded. One implementation for ``ctxpress index dead-letters`` and the console.

A retry publishes the event again on the subject it first came on (its ``Ctxpress-Subject`` header), so the index
worker checks the grants of the same user as the first time, then deletes it from the dead letters. In team mode
this connects as the console's service user, whose permissions are exactly these calls.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from ctxpress_core import identity, nats_connect
from ctxpress_core.errors import CtxpressError, ErrorCode
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import HEADER_DEAD_DELIVERIES, HEADER_DEAD_ERROR, HEADER_DEAD_SUBJECT
from indexer.stream import dead_letter_stream

_INDEX_SUBJECTS = ("ctxpress.v1.index.git", "ctxpress.v1.file_saved")


class DeadLetterError(CtxpressError, ValueError):
    """A dead letter that cannot be retried or discarded as asked (gone, or naming no index subject)."""

    code = ErrorCode.INVALID_REQUEST


@dataclass(frozen=True)
class DeadLetter:
    seq: int
    subject: str  # where it was first published (whose user it names)
    repository: str
    reason: str
    deliveries: str
    size: int


@dataclass(frozen=True)
class IndexQueue:
    pending: int | None  # events waiting for the index worker (None: the stream is not there yet)
    dead: list[DeadLetter]


@asynccontextmanager
async def _jetstream(settings: Settings) -> AsyncIterator[JetStreamContext]:
    options: dict[str, Any] = identity.service_connect_options(settings, identity.CONSOLE_USER)
    nc = await nats_connect.connect(settings.nats_servers(), connect_timeout=2, max_reconnect_attempts=0,
                                    allow_reconnect=False, plaintext_credentials=not settings.nats_tls, **options)
    try:
        yield nc.jetstream(timeout=5)
    finally:
        await nc.close()


def _letter(seq: int, data: bytes, headers: dict[str, str] | None) -> DeadLetter:
    headers = headers or {}
    try:
        repository = str(json.loads(data).get("repository", ""))
    except (ValueError, AttributeError):
        repository = ""
    return DeadLetter(seq, headers.get(HEADER_DEAD_SUBJECT, ""), repository, headers.get(HEADER_DEAD_ERROR, ""),
                      headers.get(HEADER_DEAD_DELIVERIES, ""), len(data))


async def queue(settings: Settings, limit: int = 100) -> IndexQueue:
    """The events pending in the index stream, and up to ``limit`` dead letters, oldest first."""
    async with _jetstream(settings) as js:
        try:
            pending: int | None = (await js.consumer_info(settings.index_stream, settings.index_consumer)).num_pending
        except NotFoundError:
            pending = None
        try:
            state = (await js.stream_info(dead_letter_stream(settings))).state
        except NotFoundError:
            return IndexQueue(pending, [])
        letters: list[DeadLetter] = []
        seq = state.first_seq
        while state.messages and seq <= state.last_seq and len(letters) < limit:
            try:
                msg = await js.get_msg(dead_letter_stream(settings), seq)
            except NotFoundError:  # deleted (retried or discarded): a gap in the sequence
                seq += 1
                continue
            letters.append(_letter(seq, msg.data or b"", dict(msg.headers or {})))
            seq += 1
        return IndexQueue(pending, letters)


async def retry(settings: Settings, seq: int) -> DeadLetter:
    """Publish dead letter ``seq`` again on its first subject, then remove it; DeadLetterError when it is gone."""
    stream = dead_letter_stream(settings)
    async with _jetstream(settings) as js:
        try:
            msg = await js.get_msg(stream, seq)
        except NotFoundError:
            raise DeadLetterError(f"no dead letter {seq} (retried or discarded already?)") from None
        letter = _letter(seq, msg.data or b"", dict(msg.headers or {}))
        subject = letter.subject
        if not (subject in _INDEX_SUBJECTS or identity.subject_kind(subject) in ("index_git", "file_saved")):
            raise DeadLetterError(f"dead letter {seq} names no index subject ({subject!r}); discard it instead")
        if (await js.stream_info(stream)).config.deny_delete:  # checked first: a retry publishes, then deletes
            raise DeadLetterError(f"the stream {stream} refuses deletes (made so by a development build); remove it "
                                  "(`nats stream rm`) and restart an index worker to make it again")
        await js.publish(subject, msg.data or b"")
        await js.delete_msg(stream, seq)
        return letter


async def discard(settings: Settings, seq: int) -> None:
    async with _jetstream(settings) as js:
        try:
            await js.delete_msg(dead_letter_stream(settings), seq)
        except NotFoundError:
            raise DeadLetterError(f"no dead letter {seq} (retried or discarded already?)") from None
