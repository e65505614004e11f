"""Issue 43: the services answer only to the sender's own inbox. The completion worker and the gateway have
``allow_responses``, and nats-server lets their one answer through whatever the request's reply subject is: alice's
feedback with ``reply="ctxpress.v1.s.0.u.bob.complete"`` was a request as bob on a shard's subject, and with
``reply="ctxpress.v1.index.dead"`` it planted a dead letter (a `ctxpress status` alert). JetStream acks a
developer's own publish at the reply subject she names, too: on a shard's subject that was a request as bob.

Real NATS with TLS and two team users, a real completion worker (and a gateway in front of a shard's worker),
PostgreSQL for the grants and the telemetry rows; no engine (nothing here reaches it)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError
from sqlalchemy import text

from ctxpress import dead_letters
from ctxpress_core import identity
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import SUBJECT_INDEX_DEAD
from db.session import engine_for
from indexer.pipeline import Indexer
from indexer.stream import dead_letter_stream, ensure_stream, next_batch
from serving.triton_client import TritonEmbedder
from tests.conftest import free_port
from tests.team_services import add_developer, embedded_postgres, team_nats, team_settings
from workers.grants import Grants
from workers.index_worker import IndexWorker

# --- the rule ---------------------------------------------------------------------------------------------

ALICE_INBOX = "_INBOX.alice.Xq1.7"
GATEWAY_INBOX = "_INBOX.gateway.Zz9.3"


@pytest.mark.parametrize(("subject", "reply", "team", "allowed"), [
    # a user's subject: her own inbox only
    ("ctxpress.v1.u.alice.feedback", ALICE_INBOX, True, True),
    ("ctxpress.v1.u.alice.feedback", None, True, True),  # fire and forget
    ("ctxpress.v1.u.alice.file_opened", "", True, True),
    ("ctxpress.v1.u.alice.complete", ALICE_INBOX, True, True),
    ("ctxpress.v1.u.alice.complete", None, True, False),  # a completion nobody receives: a JetStream ack's shape
    ("ctxpress.v1.u.alice.feedback", "ctxpress.v1.s.0.u.bob.complete", True, False),
    ("ctxpress.v1.u.alice.feedback", "ctxpress.v1.index.dead", True, False),
    ("ctxpress.v1.u.alice.feedback", "$JS.API.STREAM.PURGE.CTXPRESS_INDEX", True, False),
    ("ctxpress.v1.u.alice.feedback", "_INBOX.bob.Xq1.7", True, False),
    ("ctxpress.v1.u.alice.feedback", "_INBOX.alice", True, False),
    ("ctxpress.v1.u.alice.feedback", "_INBOX.alicex.1", True, False),
    ("ctxpress.v1.u.alice.feedback", "_INBOX.alice.>", True, False),
    ("ctxpress.v1.u.alice.feedback", "_INBOX.alice..1", True, False),
    ("ctxpress.v1.u.alice.complete", ALICE_INBOX, False, True),  # whatever the mode
    ("ctxpress.v1.u.alice.complete", "ctxpress.v1.index.dead", False, False),
    # a shard's subject: the gateway's inbox only, and the gateway always asks
    ("ctxpress.v1.s.0.u.bob.complete", GATEWAY_INBOX, True, True),
    ("ctxpress.v1.s.0.u.bob.feedback", GATEWAY_INBOX, True, True),
    ("ctxpress.v1.s.0.u.bob.complete", None, True, False),
    ("ctxpress.v1.s.0.u.bob.complete", ALICE_INBOX, True, False),
    ("ctxpress.v1.s.0.u.bob.complete", "_INBOX.worker.1", True, False),
    ("ctxpress.v1.s.x.u.bob.complete", "ctxpress.v1.index.dead", True, False),
    # the single-user subjects: the services' probes in team mode; anyone on a single-user appliance
    ("ctxpress.v1.complete", "_INBOX.worker.1.2", True, True),
    ("ctxpress.v1.complete", "ctxpress.v1.index.dead", True, False),
    ("ctxpress.v1.index.status", "_INBOX.worker.1", True, True),
    ("ctxpress.v1.index.status", "ctxpress.v1.s.0.u.bob.complete", True, False),
    ("ctxpress.v1.complete", "my.own.inbox.1", False, True),
    ("ctxpress.v1.complete", None, False, True),
])
def test_a_service_answers_only_the_senders_own_inbox(subject: str, reply: str | None, team: bool,
                                                      allowed: bool) -> None:
    assert (identity.reply_refused(subject, reply, team=team) is None) is allowed


# --- over NATS ------------------------------------------------------------------------------------------


@dataclass
class Team:
    settings: Settings
    env: dict[str, str]
    alice: identity.NatsCredentials  # granted alpha
    bob: identity.NatsCredentials  # granted alpha


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("replies")
    with embedded_postgres(root / "pg") as url:
        settings = team_settings(root / "home", url)
        with team_nats(settings):
            env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
            env.update({"CTXPRESS_HOME": str(settings.home), "CTXPRESS_TEAM": "true", "CTXPRESS_DATABASE_URL": url,
                        "CTXPRESS_NATS_PORT": str(settings.nats_port),
                        "CTXPRESS_NATS_MONITOR_PORT": str(settings.nats_monitor_port),
                        "CTXPRESS_MODEL_PATH": str(model_path), "CTXPRESS_WORKER_METRICS_PORT": "0",
                        "CTXPRESS_TRITON_URL": f"127.0.0.1:{free_port()}"})  # no engine: nothing reaches it
            yield Team(settings, env, add_developer(settings, "alice", ["alpha"]),
                       add_developer(settings, "bob", ["alpha"]))


@contextmanager
def services(env: dict[str, str], sharded: bool) -> Iterator[None]:
    """One completion worker on the users' subjects, or a gateway in front of shard 0's worker."""
    if sharded:
        env = {**env, "CTXPRESS_SHARDS": "1"}
        commands = [("workers.gateway", {}), ("workers.completion", {"CTXPRESS_SHARD": "0"})]
    else:
        commands = [("workers.completion", {})]
    procs = [subprocess.Popen([sys.executable, "-m", module], env={**env, **extra}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for module, extra in commands]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


async def connect(credentials: identity.NatsCredentials) -> nats.NATS:
    return await nats.connect(credentials.nats_url, connect_timeout=5, allow_reconnect=False,
                              **credentials.connect_options())


@pytest.fixture
async def observer(team: Team) -> AsyncIterator[nats.NATS]:
    """A service's connection: the completion worker's credential may listen on the shards' subjects, the
    indexer's reads the dead-letter stream."""
    conn = await nats.connect(team.settings.effective_nats_url(), connect_timeout=5,
                              **identity.service_connect_options(team.settings))
    yield conn
    await conn.close()


@pytest.fixture
async def indexer(team: Team) -> AsyncIterator[Any]:
    conn = await nats.connect(team.settings.effective_nats_url(), connect_timeout=5,
                              **identity.service_connect_options(team.settings, identity.INDEXER_USER))
    js = conn.jetstream(timeout=5)
    await ensure_stream(js, team.settings)  # what the index worker does when it starts
    yield js
    await conn.close()


async def feedback_answered(alice: nats.NATS, credentials: identity.NatsCredentials) -> dict[str, Any]:
    """Alice's own feedback, asked until the services are up: answered at her inbox."""
    deadline = time.monotonic() + 90
    body = json.dumps({"completion_id": "c-alice", "action": "shown"}).encode()
    while True:
        try:
            return dict(json.loads((await alice.request(credentials.subject("feedback"), body, timeout=5)).data))
        except (NoRespondersError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


def error_rows(database_url: str, user: str) -> int:
    with engine_for(database_url).connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM completion_events WHERE user_name = :user"),
                                {"user": user}).scalar_one())


async def more_rows_of(database_url: str, user: str, than: int) -> int:
    """The telemetry rows of ``user`` once there are more than ``than`` (the writer flushes every half second)."""
    deadline = time.monotonic() + 30
    while True:
        rows = error_rows(database_url, user)
        if rows > than or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.2)


@pytest.mark.services
@pytest.mark.parametrize("sharded", [False, True], ids=["worker", "gateway"])
async def test_a_chosen_reply_subject_reaches_neither_a_shard_nor_the_dead_letters(
        team: Team, observer: nats.NATS, indexer: Any, sharded: bool) -> None:
    dead_before = (await indexer.stream_info(dead_letter_stream(team.settings))).state.messages
    on_shard = await observer.subscribe(identity.shard_user_subject("*", "bob", "complete"))
    await observer.flush()
    with services(team.env, sharded):
        alice = await connect(team.alice)
        try:
            assert await feedback_answered(alice, team.alice) == {"ok": True}
            feedback = json.dumps({"completion_id": "c-alice", "action": "shown"}).encode()
            for reply in (identity.shard_user_subject(0, "bob", "complete"), "ctxpress.v1.index.dead",
                          f"$JS.API.STREAM.PURGE.{team.settings.index_stream}"):
                await alice.publish(team.alice.subject("feedback"), feedback, reply=reply)
            # served in order after the three: its answer comes when theirs would have been sent
            assert await feedback_answered(alice, team.alice) == {"ok": True}
        finally:
            await alice.close()
        try:
            msg = await on_shard.next_msg(timeout=1)
            as_bob: tuple[str, bytes] | None = (msg.subject, msg.data)
        except TimeoutError:
            as_bob = None
    dead = (await indexer.stream_info(dead_letter_stream(team.settings))).state.messages
    # before: alice's `{"ok": true}` as bob's request on shard 0, and one dead letter more
    assert (as_bob, dead) == (None, dead_before)


@pytest.mark.services
@pytest.mark.parametrize("sharded", [False, True], ids=["worker", "gateway"])
async def test_a_jetstream_ack_sent_where_alice_chose_is_no_request_as_bob(
        team: Team, observer: nats.NATS, indexer: Any, sharded: bool) -> None:
    """The server acks alice's own save at her chosen reply subject (its own client: no permission stops it).
    On bob's subject, or on a shard's subject as bob, the worker must not take it for bob's request."""
    target = identity.shard_user_subject(0, "bob", "complete") if sharded else team.bob.subject("complete")
    database_url = team.settings.effective_database_url()
    bob_before, alice_before = error_rows(database_url, "bob"), error_rows(database_url, "alice")
    acks = await observer.subscribe(target)
    await observer.flush()
    with services(team.env, sharded):
        alice = await connect(team.alice)
        try:
            await feedback_answered(alice, team.alice)
            save = {"repository": "alpha", "path": "notes.py", "text": "x = 1\n"}
            await alice.publish(team.alice.subject("file_saved"), json.dumps(save).encode(), reply=target)
            ack = await acks.next_msg(timeout=10)  # the server's JetStream acked the save there
            assert json.loads(ack.data)["stream"] == team.settings.index_stream and not ack.reply
            # alice's own refused request, after it: its row is written after the one bob's would have had
            request = {"repository": "beta", "path": "a.py", "text": "x\n", "line": 0, "column": 0}
            answer = json.loads((await alice.request(team.alice.subject("complete"), json.dumps(request).encode(),
                                                     timeout=30)).data)
            assert answer["error"]["code"] == "forbidden"
            assert await more_rows_of(database_url, "alice", alice_before) == alice_before + 1
        finally:
            await alice.close()
    assert error_rows(database_url, "bob") == bob_before  # before: an invalid_request row as bob


async def stored(js: Any, stream: str, more_than: int) -> int:
    """The stream's message count once it holds more than ``more_than`` (a publish is stored asynchronously)."""
    deadline = time.monotonic() + 30
    while True:
        messages = int((await js.stream_info(stream)).state.messages)
        if messages > more_than or time.monotonic() > deadline:
            return messages
        await asyncio.sleep(0.1)


@pytest.mark.services
async def test_a_jetstream_ack_at_the_dead_letter_subject_is_no_dead_letter(team: Team, indexer: Any) -> None:
    """The server acks alice's own save at the reply subject she chose, ``ctxpress.v1.index.dead``: the
    dead-letter stream stored that ack (a permanent `ctxpress status` alert). The index worker's own dead letters
    must still land there."""
    settings = team.settings.model_copy(update={"index_max_deliver": 1})  # given up on at the first failure
    dead_before = (await indexer.stream_info(dead_letter_stream(settings))).state.messages
    pending_before = (await indexer.stream_info(settings.index_stream)).state.messages
    alice = await connect(team.alice)
    try:
        save = {"repository": "alpha", "path": "planted.py", "text": "x = 1\n"}
        await alice.publish(team.alice.subject("file_saved"), json.dumps(save).encode(), reply=SUBJECT_INDEX_DEAD)
        await alice.flush()
    finally:
        await alice.close()
    # stored, so acked at her reply subject before the index worker below gives up on anything
    assert await stored(indexer, settings.index_stream, pending_before) == pending_before + 1
    # an index worker whose database is down: every pending event (hers among them) becomes a real dead letter
    down = f"postgresql+psycopg://ctxpress@127.0.0.1:{free_port()}/ctxpress"
    embedder = TritonEmbedder("127.0.0.1:1")
    url = settings.effective_database_url()
    worker = IndexWorker(settings, Indexer(down, embedder), grants=Grants(url), js=indexer)
    sub = await indexer.pull_subscribe_bind(settings.index_consumer, settings.index_stream)
    try:
        while msgs := await next_batch(sub):
            await worker.handle_batch(msgs)
    finally:
        await sub.unsubscribe()
        embedder.close()
    assert worker.stats.dead_lettered == pending_before + 1
    letters = (await dead_letters.queue(settings, limit=1000)).dead  # as the console lists them
    # before: one letter more, the ack, with no subject of its own (`{"stream": "CTXPRESS_INDEX", "seq": N}`)
    assert (len(letters), [letter.subject for letter in letters if not letter.subject]) == (
        dead_before + worker.stats.dead_lettered, [])
    assert letters[-1].subject == team.alice.subject("file_saved") and letters[-1].repository == "alpha"
