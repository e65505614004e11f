"""The JetStream stream and durable consumer that carry index events (hooks, IDE saves).

Shared by the index worker (which creates them at start) and ``ctxpress hooks install`` (which
creates them early, so commits made before the first worker starts are kept).
"""

from __future__ import annotations

from dataclasses import replace

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from ctxpress.settings import Settings
from ctxpress.team import user_subject
from ctxpress.wire.v1 import SUBJECT_FILE_SAVED, SUBJECT_INDEX_GIT

ACK_WAIT_S = 10.0  # a worker killed mid-batch: its messages come back after this long
MAX_BATCH = 256
MAX_DELIVER = 20


def stream_config(settings: Settings) -> StreamConfig:
    return StreamConfig(
        name=settings.index_stream,
        # Team mode: editors save on their own subject (ctxpress/team.py), the worker checks their grant.
        subjects=[SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED, user_subject("*", "file_saved")],
        retention=RetentionPolicy.WORK_QUEUE,  # an acked event is done: it leaves the stream
        storage=StorageType.FILE,
        max_age=7 * 24 * 3600,
        max_bytes=1 << 30,
        max_msg_size=8 << 20,
    )


def consumer_config(settings: Settings) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=settings.index_consumer,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ACK_WAIT_S,
        max_deliver=MAX_DELIVER,
        max_ack_pending=4 * MAX_BATCH,
    )


async def ensure_stream(js: JetStreamContext, settings: Settings) -> None:
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
