"""Issue 31, item 1 (the index stream's side): one event the database refuses must not hold back the other
events of its batch; issue 43: nor cost a pass per event. Real JetStream (a stream of the test's own, so the
appliance's index worker is left alone), the real indexer, embedder and PostgreSQL."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StorageType, StreamConfig
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ctxpress_core.wire.v1 import ChangedPath, IndexEvent
from db.models import CodeChunk, Repository
from db.session import engine_for
from indexer.pipeline import Indexer
from serving.triton_client import TritonEmbedder
from workers.index_worker import IndexWorker

pytestmark = pytest.mark.services


@contextmanager
def refusing(url: str, prefix: str) -> Iterator[None]:
    """PostgreSQL refuses every file row whose path starts with ``prefix`` as a value it can never store (SQLSTATE
    54000, what an index entry too large gets): a refusal the wire cannot foresee, made by the real database."""
    name = f"refuse_{uuid.uuid4().hex[:8]}"
    with engine_for(url).begin() as conn:
        conn.execute(text(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF NEW.path LIKE '{prefix}%' THEN RAISE EXCEPTION 'refused for the test' USING ERRCODE = '54000';"
            " END IF; RETURN NEW; END $$"))
        conn.execute(text(f"CREATE TRIGGER {name} BEFORE INSERT OR UPDATE ON indexed_files"
                          f" FOR EACH ROW EXECUTE FUNCTION {name}()"))
    try:
        yield
    finally:
        with engine_for(url).begin() as conn:
            conn.execute(text(f"DROP TRIGGER {name} ON indexed_files"))
            conn.execute(text(f"DROP FUNCTION {name}()"))


class CountingEmbedder(TritonEmbedder):
    """The real embedder, counting its calls (each is a pass over the chunks of an attempt)."""

    calls = 0

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        self.calls += 1
        return super().embed(texts, progress)


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
        for path, body in ((f"poison-{tag}.py", "def refused():\n    return 0\n"),
                           ("ok.py", f"def {symbol}(value):\n    return value + 1\n")):
            event = IndexEvent(repository=name, commit=uuid.uuid4().hex + "00000000", hook="post-commit",
                               changes=[ChangedPath(path=path, status="A", text=body)])
            await js.publish(subject, event.model_dump_json().encode())
        sub = await js.pull_subscribe(subject, durable=f"isolation{tag}", stream=stream)
        msgs = await sub.fetch(2, timeout=5)
        assert len(msgs) == 2
        worker = IndexWorker(settings, Indexer(url, embedder))
        with refusing(url, "poison-"):
            await worker.handle_batch(msgs)
        # Before the fix the batch failed whole and both were nak'd: the good file never reached the index
        # (JetStream redelivered the pair until max_deliver, failing each time).
        with Session(engine_for(url)) as session:
            symbols = set(session.scalars(select(CodeChunk.symbol).join(Repository).where(Repository.name == name)))
        assert symbols == {symbol}
        assert worker.stats.failures == 1
        # a value refused (SQLSTATE 54000, e.g. an index entry too large) is refused for good: terminated, not
        # redelivered until JetStream gives up; the good one acked. Nothing comes back (a nak'd event would, after 2 s).
        assert worker.stats.refused == 1
        with pytest.raises(NatsTimeoutError):
            await sub.fetch(1, timeout=4)
    finally:
        embedder.close()
        await js.delete_stream(stream)


async def test_one_refused_event_costs_its_batch_a_logarithmic_number_of_passes(appliance: Any,
                                                                                nats_client: Any) -> None:
    """Issue 43: the batch that failed was retried one event at a time, so one poison event among 256 cost 256
    passes (embedder calls and transactions). Now each failing half is retried on its own: about 2·log2(n)."""
    settings = appliance.settings
    url = settings.effective_database_url()
    js = nats_client.jetstream()
    tag = uuid.uuid4().hex[:8]
    stream, subject = f"HALVES_{tag}", f"ctxpress.test.halves.{tag}"
    await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.MEMORY))
    name, n = f"halves-{tag}", 16
    embedder = CountingEmbedder(settings.effective_triton_url())
    try:
        for i in range(n):
            path, body = ((f"poison-{tag}.py", "def refused():\n    return 0\n") if i == 5 else
                          (f"good_{i}.py", f"def good_{tag}_{i}(value):\n    return value * {i + 2}\n"))
            event = IndexEvent(repository=name, commit=uuid.uuid4().hex + "00000000", hook="post-commit",
                               changes=[ChangedPath(path=path, status="A", text=body)])
            await js.publish(subject, event.model_dump_json().encode())
        sub = await js.pull_subscribe(subject, durable=f"halves{tag}", stream=stream)
        msgs = await sub.fetch(n, timeout=5)
        assert len(msgs) == n
        worker = IndexWorker(settings, Indexer(url, embedder))
        with refusing(url, "poison-"):
            await worker.handle_batch(msgs)
        with Session(engine_for(url)) as session:
            symbols = set(session.scalars(select(CodeChunk.symbol).join(Repository).where(Repository.name == name)))
        assert symbols == {f"good_{tag}_{i}" for i in range(n) if i != 5}
        assert (worker.stats.failures, worker.stats.refused) == (1, 1)
        # the whole batch once, then two halves per level down to the poison event: 1 + 2·log2(16) = 9 (17 before)
        assert embedder.calls <= 1 + 2 * math.ceil(math.log2(n)), embedder.calls
    finally:
        embedder.close()
        await js.delete_stream(stream)
