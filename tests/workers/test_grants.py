"""Team mode in the workers: the user comes from the NATS subject, the repository must be granted.

The grant cache runs against a real PostgreSQL. The worker tests run the real ``run_worker`` of the completion and
index workers in team mode, against a real nats-server started from the generated configuration and a real
PostgreSQL, with the engine side replaced (a recording stand-in for Triton and for retrieval, a character-count
tokenizer): a second full appliance in team mode (Triton and the model) is too heavy for a 2-core machine next
to the session one. What is checked is what reaches the engine and retrieval, and what each user gets back.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import nats
import pytest
from sqlalchemy import text

from ctxpress import team
from ctxpress.services import CompletionWorkerPart, IndexWorkerPart, NatsPart
from ctxpress.settings import Settings
from ctxpress.wire.v1 import SUBJECT_FILE_SAVED, SUBJECT_INDEX_GIT, content_hash
from db import team as store
from db.session import engine_for
from indexer.pipeline import IndexSummary
from indexer.stream import ensure_stream, stream_config
from serving.triton_client import CompletionResult
from tests.team_services import add_developer, embedded_postgres, team_nats, team_settings
from workers import completion, index_worker
from workers.context.retrieval import Retrieval, RetrievalReport
from workers.grants import GRANTS_TTL_S, Caller, Forbidden, Grants, GrantsUnavailable

CODE = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_postgres(tmp_path_factory.mktemp("grants-pg")) as url:
        yield url


# --- the cached grant check ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_grants_are_cached_for_at_most_the_ttl(database_url: str) -> None:
    store.add_user(database_url, "erin", "$2a$04$unused", ["alpha"])
    clock = Clock()
    grants = Grants(database_url, clock=clock)
    assert GRANTS_TTL_S <= 2.0
    assert await grants.authorize("erin", "alpha") == Caller("erin", ("alpha",))
    with pytest.raises(Forbidden, match="no grant for repository 'beta'"):
        await grants.authorize("erin", "beta")
    store.revoke(database_url, "erin", ["alpha"])
    clock.now += GRANTS_TTL_S / 2
    assert (await grants.authorize("erin", "alpha")).repositories == ("alpha",)  # still the cached grants
    clock.now += GRANTS_TTL_S / 2
    with pytest.raises(Forbidden):
        await grants.authorize("erin", "alpha")  # read again: the revoke is seen
    with pytest.raises(Forbidden, match=r"ctxpress\.v1\.u\.<user>"):
        await grants.authorize(None, "alpha")  # team mode: no user, no service
    with pytest.raises(Forbidden):
        await grants.authorize("nobody", "alpha")


async def test_a_database_that_cannot_be_read_refuses_the_request() -> None:
    grants = Grants("postgresql+psycopg://postgres@127.0.0.1:1/postgres")
    with pytest.raises(GrantsUnavailable):
        await grants.authorize("erin", "alpha")


def test_file_store_keys_are_per_user() -> None:
    digest = content_hash(CODE)
    assert Caller(None, ("alpha",)).file_key(digest) == digest  # the single-user appliance, as before
    assert Caller("alice", ("alpha",)).file_key(digest) != Caller("bob", ("alpha",)).file_key(digest)


# --- the completion worker in team mode --------------------------------------------------------------------


class RecordingTriton:
    """Stands in for the engine: records every prompt and its KV key; a prompt with ``# slow`` takes 2 s."""

    prompts: ClassVar[list[tuple[str, str | None]]] = []

    def __init__(self, url: str) -> None:
        pass

    async def complete(self, prompt: str, **kwargs: Any) -> CompletionResult:
        self.prompts.append((prompt, kwargs.get("cache_key")))
        if "# slow" in prompt:
            await asyncio.sleep(2.0)
        return CompletionResult(text="b", finish_reason="stop", first_token_ms=1.0, total_ms=2.0)

    async def close(self) -> None:
        pass


class RecordingRetriever:
    repositories: ClassVar[list[list[str]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def retrieve(self, **kwargs: Any) -> Retrieval:
        self.repositories.append(list(kwargs["repositories"]))
        return Retrieval([], RetrievalReport())


def engine_stand_ins() -> pytest.MonkeyPatch:
    """The completion worker without Triton, the model's tokenizer or the embedder."""
    patch = pytest.MonkeyPatch()
    patch.setattr(completion, "load_tokenizer", lambda s: lambda t: max(1, len(t) // 4))
    patch.setattr(completion, "warm_up", lambda: None)
    patch.setattr(completion, "exact_counter", lambda counter: None)
    patch.setattr(completion, "TritonCompletionClient", RecordingTriton)
    patch.setattr(completion, "Retriever", RecordingRetriever)
    patch.setattr(completion, "AsyncTritonEmbedder", lambda url: None)
    return patch


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Settings]:
    settings = team_settings(tmp_path_factory.mktemp("grants-home"), database_url)
    with team_nats(settings):
        yield settings


@pytest.fixture(scope="module")
async def completion_worker(settings: Settings) -> AsyncIterator[None]:
    patch = engine_stand_ins()
    stop = asyncio.Event()
    task = asyncio.create_task(completion.run_worker(settings, stop))
    try:
        await _wait_for_worker(settings, settings.completion_subject)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        patch.undo()


async def _wait_for_worker(settings: Settings, subject: str, payload: bytes = b"{}") -> None:
    nc = await nats.connect(settings.effective_nats_url(), **team.service_connect_options(settings))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                await nc.request(subject, payload, timeout=1)
                return
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def alice(settings: Settings) -> team.NatsCredentials:
    return add_developer(settings, "alice", ["alpha"])


@pytest.fixture(scope="module")
def bob(settings: Settings) -> team.NatsCredentials:
    return add_developer(settings, "bob", ["alpha", "beta"])


async def ask(credentials: team.NatsCredentials, kind: str, body: dict[str, Any], wait_s: float = 30) -> dict[str, Any]:
    nc = await nats.connect(credentials.nats_url, **credentials.connect_options())
    try:
        reply = await nc.request(credentials.subject(kind), json.dumps(body).encode(), timeout=wait_s)
        return dict(json.loads(reply.data))
    finally:
        await nc.close()


def request(repository: str, **over: Any) -> dict[str, Any]:
    return {"repository": repository, "path": "calc.py", "text": CODE, "line": 1, "column": len("    return a + "),
            "max_tokens": 4, **over}


async def test_a_granted_repository_is_served_and_scoped_to_its_user(completion_worker: None,
                                                                    alice: team.NatsCredentials) -> None:
    RecordingTriton.prompts.clear()
    RecordingRetriever.repositories.clear()
    reply = await ask(alice, "complete", request("alpha"))
    assert "error" not in reply, reply
    assert reply["finish_reason"] == "stop" and reply["mode"] == "optimized"
    assert RecordingRetriever.repositories == [["alpha"]]
    ((prompt, cache_key),) = RecordingTriton.prompts
    assert "return a + " in prompt
    assert cache_key is not None and ":alice:alpha:calc.py" in cache_key  # the KV pool is the user's own


async def test_a_repository_without_grant_is_forbidden_and_reaches_nothing(completion_worker: None,
                                                                          alice: team.NatsCredentials) -> None:
    RecordingTriton.prompts.clear()
    RecordingRetriever.repositories.clear()
    reply = await ask(alice, "complete", request("beta", text="SECRET_OF_BETA = 1\n", line=0, column=0))
    assert reply["error"]["code"] == "forbidden", reply
    assert "beta" in reply["error"]["message"]
    opened = await ask(alice, "file_opened", {"repository": "beta", "path": "calc.py", "text": CODE})
    assert opened["error"]["code"] == "forbidden"
    assert RecordingTriton.prompts == [] and RecordingRetriever.repositories == []


async def test_requests_without_a_user_are_forbidden_in_team_mode(completion_worker: None,
                                                                  settings: Settings) -> None:
    # Only the worker credential may publish on the single-user subject (for the probes); a valid request
    # there still names no user.
    nc = await nats.connect(settings.effective_nats_url(), **team.service_connect_options(settings))
    try:
        reply = json.loads((await nc.request(settings.completion_subject, json.dumps(request("alpha")).encode(),
                                             timeout=30)).data)
    finally:
        await nc.close()
    assert reply["error"]["code"] == "forbidden", reply


async def test_the_probes_of_up_and_the_supervisor_log_in_as_the_worker(completion_worker: None,
                                                                       settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    part = CompletionWorkerPart(settings)
    assert await loop.run_in_executor(None, part.ready)
    assert await loop.run_in_executor(None, part.answers)


@pytest.mark.parametrize("module", ["workers.completion", "workers.index_worker"])
def test_workers_refuse_team_mode_without_credentials(module: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    env.update(CTXPRESS_HOME=str(tmp_path), CTXPRESS_NATS_URL="nats://nats.team.internal:4222")
    done = subprocess.run([sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert "refusing to start" in done.stderr and "CTXPRESS_NATS_CREDENTIALS is not set" in done.stderr
    assert "Traceback" not in done.stderr


def _complete_cli(credentials: Path, file: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    return subprocess.run([sys.executable, "-m", "ctxpress.cli", "complete", str(file), "--line", "1", "--column",
                           "15", "--json"], env={**env, "CTXPRESS_NATS_CREDENTIALS": str(credentials)},
                          capture_output=True, text=True, timeout=120, check=False)


async def test_ctxpress_complete_asks_as_the_user_of_its_credentials_file(completion_worker: None,
                                                                          alice: team.NatsCredentials,
                                                                          tmp_path: Path) -> None:
    credentials = team.write_credentials(tmp_path / "alice.json", alice)
    loop = asyncio.get_running_loop()
    for repository, expected in (("alpha", None), ("beta", "forbidden")):  # a folder outside git: its name
        (tmp_path / repository).mkdir()
        (tmp_path / repository / "calc.py").write_text(CODE)
        done = await loop.run_in_executor(None, _complete_cli, credentials, tmp_path / repository / "calc.py")
        reply = json.loads(done.stdout)
        assert (reply.get("error") or {}).get("code") == expected, (done.stdout, done.stderr)


async def test_a_content_hash_one_user_sent_is_unknown_to_another(completion_worker: None,
                                                                 alice: team.NatsCredentials,
                                                                 bob: team.NatsCredentials) -> None:
    private = CODE + "\nALICE_ONLY = 42\n"
    first = await ask(alice, "complete", request("alpha", text=private))
    assert "error" not in first, first
    by_hash = request("alpha", content_hash=content_hash(private))
    del by_hash["text"]
    assert "error" not in await ask(alice, "complete", by_hash)
    reply = await ask(bob, "complete", by_hash)  # bob holds the grant for alpha too
    assert reply["error"]["code"] == "unknown_content", reply


async def test_a_user_cannot_cancel_another_users_request(completion_worker: None, alice: team.NatsCredentials,
                                                          bob: team.NatsCredentials) -> None:
    nc_alice = await nats.connect(alice.nats_url, **alice.connect_options())
    nc_bob = await nats.connect(bob.nats_url, **bob.connect_options())
    try:
        slow = json.dumps(request("alpha", text=CODE + "# slow\n", request_id="r-1")).encode()
        pending = asyncio.create_task(nc_alice.request(alice.subject("complete"), slow, timeout=30))
        await asyncio.sleep(0.5)
        await nc_bob.publish(bob.subject("cancel"), b'{"request_id": "r-1"}')
        assert "error" not in json.loads((await pending).data)  # bob's cancel named no request of his
        pending = asyncio.create_task(nc_alice.request(alice.subject("complete"), slow, timeout=30))
        await asyncio.sleep(0.5)
        await nc_alice.publish(alice.subject("cancel"), b'{"request_id": "r-1"}')
        assert json.loads((await pending).data)["error"]["code"] == "cancelled"
    finally:
        await nc_alice.close()
        await nc_bob.close()


async def test_revoke_takes_effect_without_restarting_the_worker(completion_worker: None, settings: Settings,
                                                                 bob: team.NatsCredentials) -> None:
    assert "error" not in await ask(bob, "complete", request("beta"))
    store.revoke(settings.effective_database_url(), "bob", ["beta"])
    revoked_at = time.monotonic()
    while True:
        reply = await ask(bob, "complete", request("beta"))
        if "error" in reply:
            break
        assert time.monotonic() - revoked_at < GRANTS_TTL_S + 1.0, "the revoke was not seen in time"
        await asyncio.sleep(0.1)
    assert reply["error"]["code"] == "forbidden"
    assert time.monotonic() - revoked_at <= GRANTS_TTL_S + 1.0
    assert "error" not in await ask(bob, "complete", request("alpha"))  # the other grant stays


async def test_telemetry_rows_name_the_user(completion_worker: None, settings: Settings,
                                            alice: team.NatsCredentials) -> None:
    reply = await ask(alice, "complete", request("alpha", request_id="telemetry-1"))
    assert "error" not in reply
    assert (await ask(alice, "feedback", {"completion_id": reply["id"], "action": "accepted"})) == {"ok": True}
    await ask(alice, "complete", request("beta", request_id="telemetry-2"))
    deadline = time.monotonic() + 10
    while True:
        with engine_for(settings.effective_database_url()).connect() as conn:
            events = dict(conn.execute(text(
                "SELECT request_id, user_name FROM completion_events WHERE request_id LIKE 'telemetry-%'")).all())
            feedback = conn.execute(text("SELECT user_name FROM completion_feedback WHERE completion_id = :id"),
                                    {"id": reply["id"]}).scalars().all()
        if len(events) == 2 and feedback:
            break
        assert time.monotonic() < deadline, (events, feedback)
        await asyncio.sleep(0.2)
    assert events == {"telemetry-1": "alice", "telemetry-2": "alice"}  # the refused one too: who tried
    assert feedback == ["alice"]


# --- the index worker in team mode -------------------------------------------------------------------------


class RecordingIndexer:
    applied: ClassVar[list[tuple[str, list[str]]]] = []

    def __init__(self, *args: Any) -> None:
        pass

    def apply_changes(self, name: str, changes: list[Any], commit: str | None = None) -> IndexSummary:
        self.applied.append((name, [c.path for c in changes]))
        return IndexSummary(repository=name, files_indexed=len(changes))


class NoEmbedder:
    def __init__(self, url: str) -> None:
        pass

    def close(self) -> None:
        pass


async def test_an_editor_save_is_indexed_only_in_a_granted_repository(settings: Settings,
                                                                      alice: team.NatsCredentials) -> None:
    patch = pytest.MonkeyPatch()
    patch.setattr(index_worker, "Indexer", RecordingIndexer)
    patch.setattr(index_worker, "TritonEmbedder", NoEmbedder)
    stop = asyncio.Event()
    task = asyncio.create_task(index_worker.run_worker(settings, stop))
    try:
        await _wait_for_worker(settings, settings.index_status_subject, b"")
        nc = await nats.connect(alice.nats_url, **alice.connect_options())
        try:
            for repository, path in (("beta", "stolen.py"), ("alpha", "mine.py")):
                saved = {"repository": repository, "path": path, "text": CODE}
                ack = await nc.jetstream().publish(alice.subject("file_saved"), json.dumps(saved).encode())
                assert ack.seq > 0
        finally:
            await nc.close()
        deadline = time.monotonic() + 20
        while ("alpha", ["mine.py"]) not in RecordingIndexer.applied:
            assert time.monotonic() < deadline, RecordingIndexer.applied
            await asyncio.sleep(0.1)
        nc = await nats.connect(settings.effective_nats_url(), **team.service_connect_options(settings))
        try:
            status = json.loads((await nc.request(settings.index_status_subject, b"", timeout=5)).data)
        finally:
            await nc.close()
        assert status["forbidden"] == 1
        assert await asyncio.get_running_loop().run_in_executor(None, IndexWorkerPart(settings).ready)
        assert all(repository != "beta" for repository, _ in RecordingIndexer.applied)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        patch.undo()


# --- the single-user appliance is unchanged ------------------------------------------------------------------


@pytest.fixture(scope="module")
def single_user(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Settings]:
    settings = team_settings(tmp_path_factory.mktemp("single-home"), database_url, team=False)
    assert not team.team_mode(settings)
    part = NatsPart(settings)
    part.start(30)
    try:
        yield settings
    finally:
        part.stop()


async def test_single_user_mode_serves_the_plain_subjects_without_login(single_user: Settings) -> None:
    patch = engine_stand_ins()
    stop = asyncio.Event()
    task = asyncio.create_task(completion.run_worker(single_user, stop))
    try:
        await _wait_for_worker(single_user, single_user.completion_subject)
        RecordingTriton.prompts.clear()
        nc = await nats.connect(single_user.effective_nats_url())
        try:
            reply = json.loads((await nc.request(single_user.completion_subject,
                                                 json.dumps(request("anything")).encode(), timeout=30)).data)
            assert "error" not in reply, reply
            assert RecordingTriton.prompts[0][1] == f"{single_user.model_name}:anything:calc.py"  # the key as before
            with pytest.raises(nats.errors.NoRespondersError):  # nobody listens on per-user subjects here
                await nc.request(team.user_subject("alice", "complete"), b"{}", timeout=2)
        finally:
            await nc.close()
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        patch.undo()


async def test_an_index_stream_made_before_team_mode_gains_the_per_user_saves(single_user: Settings) -> None:
    nc = await nats.connect(single_user.effective_nats_url())
    try:
        js = nc.jetstream()
        old = replace(stream_config(single_user), subjects=[SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED])
        await js.add_stream(old)
        await ensure_stream(js, single_user)
        info = await js.stream_info(single_user.index_stream)
        assert set(info.config.subjects or ()) == {SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED, "ctxpress.v1.u.*.file_saved"}
        assert info.config.retention == old.retention and info.config.max_age == old.max_age
    finally:
        await nc.close()
