"""Issue 31, item 1 (the index stream's side): one event the database refuses must not hold back the other
events of its batch. Real JetStream (a stream of the test's own, so the appliance's index worker is left
alone), the real indexer, embedder and PostgreSQL."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StorageType, StreamConfig
from sqlalchemy import select
from sqlalchemy.orm import Session

from ctxpress_core.wire.v1 import ChangedPath, IndexEvent
from db.models import CodeChunk, Repository
from db.session import engine_for
from indexer.embeddings import TritonEmbedder
from indexer.pipeline import Indexer
from workers.index_worker import IndexWorker

pytestmark = pytest.mark.services


def _unindexable_path() -> str:
    """A valid wire path whose row PostgreSQL refuses: its primary-key entry (random CJK, ~12 KB that do not
    compress) exceeds what a btree index entry may hold (about 2.7 KB)."""
    rng = random.Random(31)
    return "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(4000)) + ".py"


async def test_one_refused_event_does_not_hold_back_its_batch(appliance: Any, nats_client: Any) -> None:
    settings = appliance.settings
    url = settings.effective_database_url()
    js = nats_client.jetstream()
    tag = uuid.uuid4().hex[:8]
    stream, subject = f"ISOLATION_{tag}", f"ctxpress.test.isolation.{tag}"
    await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.MEMORY))
    name = f"isolation-{tag}"
    symbol = f"kept_{tag}"
    embedder = TritonEmbedder(settings.effective_triton_url())
    try:
        for path, body in ((_unindexable_path(), "def refused():\n    return 0\n"),
                           ("ok.py", f"def {symbol}(value):\n    return value + 1\n")):
            event = IndexEvent(repository=name, commit=uuid.uuid4().hex + "00000000", hook="post-commit",
                               changes=[ChangedPath(path=path, status="A", text=body)])
            await js.publish(subject, event.model_dump_json().encode())
        sub = await js.pull_subscribe(subject, durable=f"isolation{tag}", stream=stream)
        msgs = await sub.fetch(2, timeout=5)
        assert len(msgs) == 2
        worker = IndexWorker(settings, Indexer(url, embedder))
        await worker.handle_batch(msgs)
        # Before the fix the batch failed whole and both were nak'd: the good file never reached the index
        # (JetStream redelivered the pair until max_deliver, failing each time).
        with Session(engine_for(url)) as session:
            symbols = set(session.scalars(select(CodeChunk.symbol).join(Repository).where(Repository.name == name)))
        assert symbols == {symbol}
        assert worker.stats.failures == 1
        # an index entry too large (SQLSTATE 54000) is refused for good: terminated, not redelivered until
        # JetStream gives up; the good one acked. Nothing comes back (a nak'd event would, after 2 s).
        assert worker.stats.refused == 1
        with pytest.raises(NatsTimeoutError):
            await sub.fetch(1, timeout=4)
    finally:
        embedder.close()
        await js.delete_stream(stream)
