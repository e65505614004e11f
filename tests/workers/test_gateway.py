"""The gateway routes each file to its shard's worker (real NATS, real worker processes)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from ctxpress_core.errors import ErrorCode
from ctxpress_core.settings import get_settings
from workers.gateway import NO_WORKER_GRACE_S, Gateway, engine_unavailable, error_payload, read_head, route_head
from workers.sharding import shard_for

pytestmark = pytest.mark.services


def start(module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", module], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def sharded_env(appliance_env: dict[str, str], base: str) -> dict[str, str]:
    """A gateway and workers of two shards on subjects of their own (``base``), beside the appliance's."""
    return {**appliance_env, "CTXPRESS_COMPLETION_SUBJECT": base, "CTXPRESS_SHARDS": "2",
            "CTXPRESS_WORKER_METRICS_PORT": "0", "CTXPRESS_COMPLETION_QUEUE": base}


def test_route_reads_repository_and_path_only() -> None:
    data = json.dumps({"repository": "r", "path": "a/b.py", "text": "x" * 10}).encode()
    assert route_head(read_head(data), 4) == shard_for("r", "a/b.py", 4)
    assert route_head(read_head(b"{not json"), 4) == 0  # shard 0's worker answers with the structured error


def test_the_head_of_a_request_is_read_without_trusting_it() -> None:
    head = read_head(json.dumps({"repository": "r", "path": "a.py", "request_id": "q1"}).encode())
    assert (head.repository, head.path, head.request_id) == ("r", "a.py", "q1")
    assert read_head(json.dumps({"completion_id": "c1", "action": "shown"}).encode()).request_id == "c1"
    for data in (b"[1, 2]", b'"text"', b"{", b"[" * 100_000, json.dumps({"path": 3, "request_id": "x" * 200}).encode()):
        head = read_head(data)
        assert head.path is None and head.request_id is None, data[:20]


def test_only_an_unreachable_engine_sends_a_request_to_another_shard() -> None:
    assert engine_unavailable(error_payload(ErrorCode.INFERENCE_UNAVAILABLE, "Triton at x is unavailable"))
    for code in (ErrorCode.INFERENCE_TIMEOUT, ErrorCode.FORBIDDEN, ErrorCode.CURSOR_OUT_OF_RANGE):
        assert not engine_unavailable(error_payload(code, "inference_unavailable"))  # a message is not a code
    assert not engine_unavailable(b'{"id": "1", "completion": "\"code\":\"inference_unavailable\""}')


def test_a_dead_shard_moves_only_its_own_files() -> None:
    files = [f"pkg/m{i}.py" for i in range(200)]
    before = {f: shard_for("r", f, 4) for f in files}
    after = {f: shard_for("r", f, 4, exclude=frozenset({2})) for f in files}
    moved = [f for f in files if before[f] != after[f]]
    assert moved and all(before[f] == 2 for f in moved) and all(after[f] != 2 for f in files)
    assert shard_for("r", "a.py", 2, exclude=frozenset({0, 1})) in (0, 1)  # all dead: still an answer


async def test_gateway_sends_each_file_to_its_shard(appliance: Any, nats_client: Any) -> None:
    base = "test.sharded.complete"
    env = sharded_env(appliance.env, base)
    gateway = start("workers.gateway", env)
    # only shard 1 is dead (no worker): its files must move to shard 0, retried once, at once
    worker = start("workers.completion", {**env, "CTXPRESS_SHARD": "0"})
    try:
        files = [f"pkg/module_{i}.py" for i in range(12)]
        expected = {f: shard_for("repo", f, 2) for f in files}
        assert set(expected.values()) == {0, 1}
        replies: dict[str, dict[str, Any]] = {}
        for _ in range(150):  # wait for both processes to subscribe
            try:
                probe = {"repository": "repo", "path": next(f for f in files if expected[f] == 0), "text": "x\n",
                         "line": 9, "column": 0}
                msg = await nats_client.request(base, json.dumps(probe).encode(), timeout=2)
                if json.loads(msg.data)["error"]["code"] == "cursor_out_of_range":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.2)
        for f in files:
            # a cursor past the end: the worker answers at once, no model time spent
            request = {"repository": "repo", "path": f, "text": "x = 1\n", "line": 5, "column": 0}
            msg = await nats_client.request(base, json.dumps(request).encode(), timeout=30)
            replies[f] = json.loads(msg.data)
        for f in expected:
            assert replies[f]["error"]["code"] == "cursor_out_of_range", (f, replies[f])  # shard 0 answered
    finally:
        for proc in (worker, gateway):
            proc.terminate()
            proc.wait(timeout=30)


async def test_a_request_waits_out_a_moment_when_no_shard_has_a_worker(nats_client: Any) -> None:
    """A NATS node lost: the workers resubscribe through another node a moment later, and a request sent in
    between is answered once they are back, not refused."""
    gateway = Gateway(nats_client, get_settings().model_copy(update={"shards": 2}))
    data = json.dumps({"repository": "repo", "path": "pkg/a.py"}).encode()
    relayed = asyncio.create_task(gateway.relay(data, lambda shard: f"test.grace.{shard}", read_head(data)))
    await asyncio.sleep(1.0)
    assert not relayed.done()

    async def answer(msg: Any) -> None:
        await msg.respond(json.dumps({"served_by": msg.subject}).encode())

    subscriptions = [await nats_client.subscribe(f"test.grace.{shard}", cb=answer) for shard in (0, 1)]
    try:
        payload, shard = await asyncio.wait_for(relayed, 10)
        assert json.loads(payload) == {"served_by": f"test.grace.{shard}"}
        assert shard == shard_for("repo", "pkg/a.py", 2)
    finally:
        for sub in subscriptions:
            await sub.unsubscribe()


async def test_a_request_no_shard_serves_is_refused_after_the_grace(nats_client: Any) -> None:
    gateway = Gateway(nats_client, get_settings().model_copy(update={"shards": 2}))
    data = json.dumps({"repository": "repo", "path": "pkg/a.py"}).encode()
    payload, _ = await asyncio.wait_for(gateway.relay(data, lambda shard: f"test.nobody.{shard}", read_head(data)),
                                        NO_WORKER_GRACE_S + 5)
    assert json.loads(payload)["error"]["code"] == ErrorCode.INFERENCE_UNAVAILABLE
