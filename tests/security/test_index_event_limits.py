"""Issue 43: an index event naming a path longer than the index can hold is refused as invalid at decode (terminated,
counted, logged), never taken, failed by PostgreSQL and kept as a dead letter (a permanent alert anyone with a
grant could raise). A real nats-server and JetStream, a real PostgreSQL; no embedder (the event carries no text to
embed: a file the hook reports as binary is written as a row of its own)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from pydantic import ValidationError
from sqlalchemy import text

from ctxpress_core.identity import user_subject
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import MAX_INDEX_PATH_BYTES, SUBJECT_INDEX_GIT, ChangedPath, FileSaved
from db.session import engine_for
from indexer.pipeline import Indexer
from indexer.stream import dead_letters, ensure_stream
from serving.triton_client import TritonEmbedder
from tests.team_services import embedded_postgres, running_nats, team_settings
from workers.grants import Grants
from workers.index_worker import IndexWorker

pytestmark = pytest.mark.services

# ~3.6 KB of UTF-8 that do not compress: under the wire's 4096 characters of before, over what a btree entry of
# the index holds (about 2.7 KB).
_RNG = random.Random(43)
LONG_PATH = "src/" + "".join(chr(_RNG.randrange(0x4E00, 0x9FFF)) for _ in range(1200)) + ".py"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    root = tmp_path_factory.mktemp("limits")
    with embedded_postgres(root / "pg") as url:
        settings = team_settings(root / "home", url, team=False, index_max_deliver=2)
        with running_nats(settings):
            yield settings


def test_the_wire_refuses_paths_the_index_cannot_hold() -> None:
    assert len(LONG_PATH) < 4096 and len(LONG_PATH.encode()) > MAX_INDEX_PATH_BYTES
    for bad in (lambda: FileSaved(repository="r", path=LONG_PATH, text=""),
                lambda: ChangedPath(path=LONG_PATH, status="A", text="x = 1\n"),
                lambda: ChangedPath(path="b.py", status="R", old_path=LONG_PATH, text="x = 1\n")):
        with pytest.raises(ValidationError, match="path"):
            bad()
    assert ChangedPath(path="é" * (MAX_INDEX_PATH_BYTES // 2), status="A").path  # 1024 bytes: taken


async def test_a_path_too_long_for_the_index_is_invalid_not_a_dead_letter(services: Settings) -> None:
    """Before: taken at decode, refused by PostgreSQL (index row size), moved to the dead-letter stream and
    `ctxpress status` showing an alert."""
    nc = await nats.connect(services.effective_nats_url())
    embedder = TritonEmbedder("127.0.0.1:1")  # never called: nothing here is embedded
    try:
        js = nc.jetstream()
        await ensure_stream(js, services)
        event = {"repository": "alpha", "commit": "a" * 40, "hook": "post-commit",
                 "changes": [{"path": LONG_PATH, "status": "A", "skipped": "binary"}]}
        await js.publish(user_subject("alice", "index_git"), json.dumps(event).encode())
        sub = await js.pull_subscribe_bind(services.index_consumer, services.index_stream)
        msgs = await sub.fetch(1, timeout=5)
        worker = IndexWorker(services, Indexer(services.effective_database_url(), embedder), js=js)
        await worker.handle_batch(msgs)
        assert (worker.stats.invalid, worker.stats.refused, worker.stats.dead_lettered) == (1, 0, 0)
        assert await dead_letters(js, services) == 0
        with pytest.raises(NatsTimeoutError):  # terminated: never delivered again
            await sub.fetch(1, timeout=2)
    finally:
        embedder.close()
        await nc.close()


async def test_a_team_worker_refuses_an_event_without_a_user(services: Settings) -> None:
    """Team mode leaves ctxpress.v1.index.git out of the stream; one there anyway (a stream made before, an
    operator's) names no user, so no grant can be checked: terminated as forbidden. Before, it skipped the check
    and went into the shared index of whatever repository it named."""
    nc = await nats.connect(services.effective_nats_url())
    embedder = TritonEmbedder("127.0.0.1:1")
    try:
        js = nc.jetstream()
        await ensure_stream(js, services)  # single-user: the stream still takes the user-less subjects
        event = {"repository": "userless", "commit": "b" * 40, "hook": "post-commit",
                 "changes": [{"path": "blob.bin.py", "status": "A", "skipped": "binary"}]}
        await js.publish(SUBJECT_INDEX_GIT, json.dumps(event).encode())
        sub = await js.pull_subscribe_bind(services.index_consumer, services.index_stream)
        msgs = await sub.fetch(1, timeout=5)
        url = services.effective_database_url()
        worker = IndexWorker(services, Indexer(url, embedder), grants=Grants(url), js=js)  # as in team mode
        await worker.handle_batch(msgs)
        assert worker.stats.forbidden == 1
        with engine_for(url).connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM repositories WHERE name = 'userless'")).scalar() == 0
    finally:
        embedder.close()
        await nc.close()
