"""The JetStream stream and durable consumer that carry index events (hooks, IDE saves).

Shared by the index worker (which creates them at start) and ``ctxpress hooks install`` (which
creates them early, so commits made before the first worker starts are kept).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from dataclasses import replace

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from ctxpress_core.identity import INDEXER_USER, service_credentials, subject_user, team_mode, user_subject
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import SUBJECT_FILE_SAVED, SUBJECT_INDEX_DEAD, SUBJECT_INDEX_GIT

log = logging.getLogger("ctxpress.index.stream")

ACK_WAIT_S = 10.0  # a worker killed mid-batch: its messages come back after this long
MAX_BATCH = 256
DEAD_MAX_AGE_S = 30 * 24 * 3600
STREAM_MAX_BYTES = 1 << 30
# The largest event: an editor's save (up to CTXPRESS_MAX_REQUEST_BYTES) or a hook's message (parts of at most
# 4 MiB, one file alone may pass that); nats-server's own max_payload is at least this.
MAX_EVENT_BYTES = 8 << 20
# Subjects no team credential may publish on, whose events name no user: kept out of the stream in team mode.
USERLESS_SUBJECTS = (SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED)
# What ensure_stream keeps equal to stream_config on a stream made by an older version (retention and storage
# cannot change; deny_delete and deny_purge can only be switched on: see _updated).
MANAGED_FIELDS = ("discard", "discard_new_per_subject", "max_msgs_per_subject", "max_bytes", "max_msg_size",
                  "deny_delete", "deny_purge")
ONE_WAY_FIELDS = ("deny_delete", "deny_purge")  # nats-server refuses to switch these off


def stream_config(settings: Settings) -> StreamConfig:
    per_user = [user_subject("*", "file_saved"), user_subject("*", "index_git")]
    team = team_mode(settings)
    return StreamConfig(
        name=settings.index_stream,
        # Team mode: editors save, and their git hooks publish, on their own subjects; the worker checks their grant.
        # The user-less subjects only where nobody else can reach NATS (a single-user appliance).
        subjects=per_user if team else [*USERLESS_SUBJECTS, *per_user],
        retention=RetentionPolicy.WORK_QUEUE,  # an acked event is done: it leaves the stream
        storage=StorageType.FILE,
        max_age=7 * 24 * 3600,
        # Team mode: a quota per subject, so per user and kind: past it, that subject's next publish is refused (its
        # publisher gets an error ack) instead of the oldest events, anyone's, being dropped to make room; a full
        # stream refuses too, it never evicts what is pending. A single user has nobody to starve: a long rebase
        # with the worker down keeps its newest events, as before.
        discard=DiscardPolicy.NEW if team else DiscardPolicy.OLD,
        discard_new_per_subject=team,
        max_msgs_per_subject=settings.index_user_max_events if team else -1,
        max_bytes=STREAM_MAX_BYTES,
        max_msg_size=MAX_EVENT_BYTES,
        # Pending events are removed by the index worker's acks, never by an API call (a purge would drop every
        # user's events).
        deny_delete=True,
        deny_purge=True,
        num_replicas=settings.index_stream_replicas,
    )


def consumer_config(settings: Settings) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=settings.index_consumer,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ACK_WAIT_S,
        max_deliver=settings.index_max_deliver,
        max_ack_pending=4 * MAX_BATCH,
        num_replicas=settings.index_stream_replicas,
    )


def dead_letter_stream(settings: Settings) -> str:
    return f"{settings.index_stream}_DEAD"


def dead_letter_subject(settings: Settings, indexer_password: str | None = None) -> str:
    """Where the index worker puts the events it gives up on: the dead-letter stream's only subject.

    In team mode one nobody else can name. nats-server's JetStream acks a developer's own publish at whatever reply
    subject she chose, from its own client, which none of her permissions restrict: on a subject she can name the
    dead-letter stream would store her ack as a dead letter (a `ctxpress status` alert). So its last token is keyed
    with the index worker's NATS password (``indexer_password``, else read from its credential), which only that
    worker and the writer of the authorization block (its publish permission) know; developers can neither list
    streams nor read that block. A single-user appliance has nobody else: the plain subject."""
    if not team_mode(settings):
        return SUBJECT_INDEX_DEAD
    if indexer_password is None:
        indexer_password = service_credentials(settings, INDEXER_USER).password
    token = hmac.new(indexer_password.encode(), b"dead letters", hashlib.sha256).hexdigest()[:32]
    return f"{SUBJECT_INDEX_DEAD}.{token}"


def dead_letter_config(settings: Settings) -> StreamConfig:
    return StreamConfig(
        name=dead_letter_stream(settings),
        subjects=[dead_letter_subject(settings)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=DEAD_MAX_AGE_S,
        max_bytes=STREAM_MAX_BYTES,
        max_msg_size=MAX_EVENT_BYTES,
        # No purge: the alert goes when the letters age out or one by one, never all on someone's request. A
        # message delete is how the console retries or discards a letter; only the console's NATS user may send it
        # (developers have no JetStream API at all).
        deny_delete=False,
        deny_purge=True,
        num_replicas=settings.index_stream_replicas,
    )


def retry_delay_s(settings: Settings, delivered: int) -> float:
    """How long an event that failed its ``delivered``-th try waits before the next one."""
    return float(min(settings.index_retry_max_s, settings.index_retry_base_s * 2 ** max(0, delivered - 1)))


async def dead_letters(js: JetStreamContext, settings: Settings) -> int:
    """Events in the dead-letter stream (0 when there is none yet)."""
    try:
        return int((await js.stream_info(dead_letter_stream(settings))).state.messages)
    except NotFoundError:
        return 0


async def users_at_quota(js: JetStreamContext, settings: Settings) -> dict[str, int]:
    """Per-user subjects of the index stream holding their quota of pending events ("alice.file_saved" -> count):
    that user's next event of that kind is refused until the worker catches up."""
    info = await js.stream_info(settings.index_stream, subjects_filter=">")
    full: dict[str, int] = {}
    for subject, count in (info.state.subjects or {}).items():
        user = subject_user(subject)
        if user is not None and count >= settings.index_user_max_events:
            full[f"{user}.{subject.rsplit('.', 1)[-1]}"] = count
    return full


def _wanted_subjects(settings: Settings, current: StreamConfig, wanted: StreamConfig) -> set[str]:
    """The index stream keeps subjects an operator added (in team mode not the user-less ones); the dead-letter
    stream has its one subject only (a former one, anyone could name it, is dropped)."""
    if wanted.name == dead_letter_stream(settings):
        return set(wanted.subjects or ())
    dropped = set(USERLESS_SUBJECTS) if team_mode(settings) else set()
    return {*(current.subjects or ()), *(wanted.subjects or ())} - dropped


def _updated(settings: Settings, current: StreamConfig, wanted: StreamConfig) -> StreamConfig | None:
    """``current`` (a stream made by an older version, or by an operator) with what this version needs, or None
    when it has it: the subjects, the quotas, the denials."""
    changes: dict[str, object] = {f: getattr(wanted, f) for f in MANAGED_FIELDS
                                  if getattr(current, f) != getattr(wanted, f)}
    for field in ONE_WAY_FIELDS:
        if getattr(current, field) and not getattr(wanted, field):
            # a dead-letter stream made with deny_delete by a development build: kept (the update would be refused
            # and the index worker would not start); the console cannot retry or discard its letters until it is
            # made again (`nats stream rm`, then any index worker start)
            log.warning("stream %s keeps %s; nats-server cannot switch it off", current.name, field)
            changes.pop(field, None)
    subjects = _wanted_subjects(settings, current, wanted)
    if subjects != set(current.subjects or ()):
        changes["subjects"] = sorted(subjects)
    return replace(current, **changes) if changes else None  # type: ignore[arg-type]


async def ensure_stream(js: JetStreamContext, settings: Settings) -> None:
    """Make the dead-letter stream, the index stream and its consumer, or bring existing ones up to this version
    (in team mode the dead-letter stream moves to ``dead_letter_subject``)."""
    for wanted in (dead_letter_config(settings), stream_config(settings)):
        try:
            info = await js.stream_info(wanted.name or "")
        except NotFoundError:
            await js.add_stream(wanted)
            continue
        updated = _updated(settings, info.config, wanted)
        if updated is not None:
            await js.update_stream(updated)
    try:
        await js.consumer_info(settings.index_stream, settings.index_consumer)
    except NotFoundError:
        await js.add_consumer(settings.index_stream, consumer_config(settings))


async def next_batch(sub: JetStreamContext.PullSubscription) -> list[Msg]:
    """The next events of the durable consumer: as soon as one is there, with what is already waiting behind it (a
    burst, so each file is indexed once); empty after a second without any, or while the client reconnects."""
    try:
        msgs = await sub.fetch(1, timeout=1.0)
    except (TimeoutError, nats.errors.TimeoutError):
        return []
    except Exception as exc:  # a reconnect in progress, a cluster electing a new stream leader: wait and retry
        log.warning("fetch failed: %s", exc)
        await asyncio.sleep(0.5)
        return []
    try:
        pending = (await sub.consumer_info()).num_pending
        if pending:
            msgs += await sub.fetch(min(pending, MAX_BATCH - 1), timeout=0.5)
    except (TimeoutError, nats.errors.TimeoutError):
        pass
    return msgs
