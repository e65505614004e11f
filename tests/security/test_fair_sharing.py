"""One teammate cannot starve another (issue 43, fair sharing), black-box: two real team users (alice, bob)
with their own credentials over the embedded NATS with TLS, the real gateway and a real completion worker
subscribed as in production, on the scripted engine (the engine is not the point), grants and telemetry in a
real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from sqlalchemy import text

from ctxpress_core import identity
from ctxpress_core.settings import Settings
from db.session import engine_for
from serving.scripted_engine import ScriptedEngine
from tests.team_services import add_developer, embedded_postgres, team_nats, team_settings
from workers.completion.in_process import running_worker
from workers.gateway import run_gateway
from workers.telemetry import TelemetryWriter

pytestmark = pytest.mark.services

REPOSITORY = "shared"
TEXT = "def add(a, b):\n    return \n"


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_postgres(tmp_path_factory.mktemp("fair-pg")) as url:
        yield url


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Settings]:
    settings = team_settings(tmp_path_factory.mktemp("fair-home"), database_url, shards=1)
    with team_nats(settings):
        yield settings


@pytest.fixture(scope="module")
def alice(settings: Settings) -> identity.NatsCredentials:
    return add_developer(settings, "alice", [REPOSITORY])


@pytest.fixture(scope="module")
def bob(settings: Settings) -> identity.NatsCredentials:
    return add_developer(settings, "bob", [REPOSITORY])


@contextlib.asynccontextmanager
async def team_stack(settings: Settings, engine: ScriptedEngine,
                     telemetry: TelemetryWriter | None = None) -> AsyncIterator[None]:
    """The gateway and shard 0's worker, as `ctxpress up` runs them in team mode."""
    stop = asyncio.Event()
    gateway = asyncio.create_task(run_gateway(settings, stop))
    async with running_worker(settings.model_copy(update={"shard": 0}), engine, lambda s: max(1, len(s) // 4),
                              telemetry=telemetry):
        try:
            yield
        finally:
            stop.set()  # it drains and closes its connection: a gateway left subscribed would serve the next test
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(gateway), 15)
            gateway.cancel()
            await asyncio.gather(gateway, return_exceptions=True)


@contextlib.asynccontextmanager
async def developer(credentials: identity.NatsCredentials) -> AsyncIterator[nats.NATS]:
    client = await nats.connect(credentials.nats_url, connect_timeout=5, **credentials.connect_options())
    try:
        yield client
    finally:
        await client.close()


async def ask(client: nats.NATS, credentials: identity.NatsCredentials, kind: str, body: dict[str, Any] | bytes,
              timeout_s: float = 30) -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await client.request(credentials.subject(kind), data, timeout=timeout_s)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


def request(path: str, **fields: Any) -> dict[str, Any]:
    return {"repository": REPOSITORY, "path": path, "text": TEXT, "line": 1, "column": 11, **fields}


async def until_served(client: nats.NATS, credentials: identity.NatsCredentials) -> None:
    """The gateway and the worker have subscribed: a request is answered (not refused for no responders)."""
    for _ in range(100):
        try:
            answer = await ask(client, credentials, "complete", request("probe.py", max_tokens=1), timeout_s=2)
            if "error" not in answer or answer["error"]["code"] != "inference_unavailable":
                return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the gateway and the worker did not come up")


async def test_alices_long_deadline_flood_does_not_make_bob_overloaded(
        settings: Settings, alice: identity.NatsCredentials, bob: identity.NatsCredentials) -> None:
    """Twelve long-deadline requests of alice (ten seconds of engine each) on distinct files, then one short
    request of bob with a 5 s deadline. Before: all twelve were admitted and counted ahead of bob (12 x 2 s
    estimate > 5 s), and bob got ``overloaded``. Now alice holds four (the rest ``rate_limited`` with a
    retry-after) and the engine counts one of hers ahead of bob's (EDF serves his first)."""
    engine = ScriptedEngine("x " * 200, step_s=0.05)
    async with team_stack(settings, engine), developer(alice) as a, developer(bob) as b:
        await until_served(b, bob)
        engine.requests.clear()
        flood = [asyncio.create_task(ask(a, alice, "complete", request(f"flood/f{i}.py", max_tokens=256,
                                                                        timeout_ms=600_000), timeout_s=120))
                 for i in range(12)]
        for _ in range(200):
            if len(engine.requests) >= 4:
                break
            await asyncio.sleep(0.05)
        answer = await ask(b, bob, "complete", request("mine.py", max_tokens=2, timeout_ms=5_000))
        assert "error" not in answer, answer
        assert answer["completion"] == "x x"
        refused = [r for r in await asyncio.gather(*flood[4:]) if "error" in r]
        assert [r["error"]["code"] for r in refused] == ["rate_limited"] * 8
        assert all(r["error"]["retry_after_ms"] > 0 for r in refused)
        for task in flood[:4]:
            task.cancel()
        await asyncio.gather(*flood[:4], return_exceptions=True)


async def test_a_user_over_their_rate_is_told_when_to_retry_and_others_are_answered(
        settings: Settings, alice: identity.NatsCredentials, bob: identity.NatsCredentials) -> None:
    """A burst of 3 and one request every hundred seconds each: alice's ten quick requests (each refusal held back
    up to 2 s by the gateway) get three answers and seven ``rate_limited`` with ``retry_after_ms``; bob, asking
    meanwhile, is answered. Before: all ten were served."""
    limited = settings.model_copy(update={"user_request_burst": 3, "user_requests_per_s": 0.01})
    engine = ScriptedEngine("y", step_s=0.0)
    async with team_stack(limited, engine), developer(alice) as a, developer(bob) as b:
        await until_served(b, bob)  # bob's first token of the burst
        answers = [await ask(a, alice, "complete", request(f"a{i}.py")) for i in range(10)]
        codes = [r["error"]["code"] if "error" in r else "ok" for r in answers]
        assert codes.count("rate_limited") >= 7, codes
        assert all(0 < r["error"]["retry_after_ms"] <= 100_000 for r in answers if "error" in r)
        assert "error" not in await ask(b, bob, "complete", request("b.py"))


async def test_an_oversized_request_is_refused_by_the_gateway_before_it_is_read(
        settings: Settings, alice: identity.NatsCredentials) -> None:
    """8 MiB of deeply nested JSON to a gateway whose shard has no worker: refused ``payload_too_large`` at once.
    Before, the gateway parsed it on its event loop and forwarded it (``inference_unavailable`` after the grace
    for a shard without a worker)."""
    stop = asyncio.Event()
    gateway = asyncio.create_task(run_gateway(settings, stop))
    try:
        async with developer(alice) as a:
            body = b"[" * (8 << 20)
            for _ in range(100):
                try:
                    answer = await ask(a, alice, "complete", body, timeout_s=30)
                    break
                except nats.errors.NoRespondersError:  # the gateway is not subscribed yet
                    await asyncio.sleep(0.1)
            assert answer["error"]["code"] == "payload_too_large", answer
    finally:
        stop.set()
        await asyncio.gather(gateway, return_exceptions=True)


async def test_feedback_counts_only_for_the_users_own_completions(
        settings: Settings, alice: identity.NatsCredentials, bob: identity.NatsCredentials) -> None:
    """alice marks bob's completion accepted: not recorded. Before, her row joined bob's completion and
    counted in everyone's acceptance rate."""
    telemetry = TelemetryWriter(settings.effective_database_url(), flush_interval_s=0.1)
    telemetry.start()
    engine = ScriptedEngine("z", step_s=0.0)
    try:
        async with team_stack(settings, engine, telemetry), developer(alice) as a, developer(bob) as b:
            await until_served(b, bob)
            served = await ask(b, bob, "complete", request("bobs.py", request_id="bob-fair-1"))
            completion_id = served["id"]
            await ask(a, alice, "feedback", {"completion_id": completion_id, "action": "accepted"})
            await ask(b, bob, "feedback", {"completion_id": completion_id, "action": "shown"})
            rows: list[Any] = []
            for _ in range(100):
                with engine_for(settings.effective_database_url()).begin() as conn:
                    rows = list(conn.execute(text(
                        "SELECT user_name, action FROM completion_feedback WHERE completion_id = :id"),
                        {"id": completion_id}))
                if any(user == "bob" for user, _ in rows):
                    break
                await asyncio.sleep(0.1)
            assert sorted(tuple(r) for r in rows) == [("bob", "shown")]
    finally:
        await telemetry.close()


async def test_a_file_opened_storm_is_bounded_per_user(settings: Settings, alice: identity.NatsCredentials,
                                                        bob: identity.NatsCredentials) -> None:
    """Sixty file_opened of alice at once: past her share they are refused ``rate_limited`` (before: every one
    parsed and pre-warmed); bob's file_opened meanwhile is served."""
    engine = ScriptedEngine("", step_s=0.0)
    limited = settings.model_copy(update={"user_request_burst": 10})
    async with team_stack(limited, engine), developer(alice) as a, developer(bob) as b:
        await until_served(b, bob)
        opened = {"repository": REPOSITORY, "text": TEXT * 200, "language": "python"}
        storm = await asyncio.gather(*(ask(a, alice, "file_opened", {**opened, "path": f"s/{i}.py"})
                                       for i in range(60)))
        refused = [r for r in storm if r.get("error", {}).get("code") == "rate_limited"]
        assert len(refused) >= 50, storm[:3]
        assert (await ask(b, bob, "file_opened", {**opened, "path": "mine.py"})).get("ok") is True


async def test_a_user_refused_for_their_share_reaches_the_engine_weighed_below_the_others(
        settings: Settings, alice: identity.NatsCredentials, bob: identity.NatsCredentials) -> None:
    """alice asks faster than her rate (one a second, no burst) and is refused by the gateway; her next admitted
    request reaches the engine at ``flooding_share`` of a user's weight (the gateway tells the shard), bob's at 1.
    Before: every user's requests weighed alike, and a flood split the engine half and half with a typist."""
    limited = settings.model_copy(update={"user_request_burst": 1, "user_requests_per_s": 1.0})
    engine = ScriptedEngine("z", step_s=0.0)
    async with team_stack(limited, engine), developer(alice) as a, developer(bob) as b:
        await until_served(b, bob)
        await asyncio.sleep(1.1)  # bob's bucket refilled after the probes
        assert "error" not in await ask(a, alice, "complete", request("a0.py"))
        refused = await ask(a, alice, "complete", request("a1.py"))
        assert refused["error"]["code"] == "rate_limited"
        await asyncio.sleep(refused["error"]["retry_after_ms"] / 1000)
        engine.requests.clear()
        assert "error" not in await ask(a, alice, "complete", request("a2.py"))
        assert "error" not in await ask(b, bob, "complete", request("b0.py"))
        shares = {r.cache_salt: r.share for r in engine.requests if r.max_tokens > 0}
        assert sorted(shares.values()) == [limited.flooding_share, 1.0]
