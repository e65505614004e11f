"""The JetStream stream and durable consumer that carry index events (hooks, IDE saves).

Shared by the index worker (which creates them at start) and ``ctxpress hooks install`` (which
creates them early, so commits made before the first worker starts are kept).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from ctxpress_core.identity import user_subject
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import SUBJECT_FILE_SAVED, SUBJECT_INDEX_DEAD, SUBJECT_INDEX_GIT

log = logging.getLogger("ctxpress.index.stream")

ACK_WAIT_S = 10.0  # a worker killed mid-batch: its messages come back after this long
MAX_BATCH = 256
DEAD_MAX_AGE_S = 30 * 24 * 3600


def stream_config(settings: Settings) -> StreamConfig:
    return StreamConfig(
        name=settings.index_stream,
        # Team mode: editors save, and their git hooks publish, on their own subjects; the worker checks their grant.
        subjects=[SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED, user_subject("*", "file_saved"),
                  user_subject("*", "index_git")],
        retention=RetentionPolicy.WORK_QUEUE,  # an acked event is done: it leaves the stream
        storage=StorageType.FILE,
        max_age=7 * 24 * 3600,
        max_bytes=1 << 30,
        max_msg_size=8 << 20,
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


def dead_letter_config(settings: Settings) -> StreamConfig:
    return StreamConfig(
        name=dead_letter_stream(settings),
        subjects=[SUBJECT_INDEX_DEAD],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=DEAD_MAX_AGE_S,
        max_bytes=1 << 30,
        max_msg_size=8 << 20,
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


async def ensure_stream(js: JetStreamContext, settings: Settings) -> None:
    try:
        await js.stream_info(dead_letter_stream(settings))
    except NotFoundError:
        await js.add_stream(dead_letter_config(settings))
    wanted = stream_config(settings)
    try:
        info = await js.stream_info(settings.index_stream)
    except NotFoundError:
        await js.add_stream(wanted)
    else:
        if not set(wanted.subjects or ()) <= set(info.config.subjects or ()):  # made by an older version
            await js.update_stream(replace(info.config, subjects=sorted({*(info.config.subjects or ()),
                                                                         *(wanted.subjects or ())})))
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
