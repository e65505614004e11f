"""Issue 31, item 2: a malformed request is the sender's error. Deeply nested JSON, an integer too large, a
lone surrogate in the text were answered ``internal`` with a traceback in the worker's log (and through the
gateway, nested JSON got no answer at all): each gets its client-error code now. Real NATS, worker, gateway."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from ctxpress_core.errors import ErrorCode, RequestError
from ctxpress_core.wire.v1 import Feedback
from tests.workers.test_gateway import sharded_env, start
from workers.completion.request import parse_request
from workers.gateway import read_head, route_head

NESTED_ARRAY = b"[" * 100_000 + b"]" * 100_000
NESTED_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
HUGE_INT = b'{"repository": "r", "path": "a.py", "text": "x\\n", "column": 0, "line": ' + b"9" * 5000 + b"}"
REQUEST = {"repository": "r", "path": "a.py", "text": "def f(x):\n    return x\n", "line": 1, "column": 4}

# (payload, the code it must get): each was answered `internal` before the fix
MALFORMED = {
    "nested array": (NESTED_ARRAY, "invalid_json"),
    "nested object": (NESTED_OBJECT, "invalid_json"),
    "integer of 5,000 digits": (HUGE_INT, "invalid_json"),
    "lone surrogate in the text": (json.dumps({**REQUEST, "text": "x = '\ud800'\n"}).encode(), "invalid_request"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_requests_are_client_errors(name: str) -> None:
    payload, code = MALFORMED[name]
    with pytest.raises(RequestError) as refused:
        parse_request(payload, 1 << 22)
    assert refused.value.code == code


@pytest.mark.parametrize("field", ["line", "column"])
def test_a_cursor_beyond_any_file_is_an_invalid_request(field: str) -> None:
    with pytest.raises(RequestError) as refused:
        parse_request(json.dumps({**REQUEST, field: 2**63}).encode(), 1 << 20)
    assert refused.value.code == ErrorCode.INVALID_REQUEST


def test_chars_kept_must_fit_the_database_column() -> None:
    # an `integer` column: 2**31 would have made the telemetry batch holding it fail
    with pytest.raises(ValidationError):
        Feedback.model_validate_json('{"completion_id": "c", "action": "accepted", "chars_kept": 2147483648}')


def test_the_gateway_routes_what_it_cannot_read_to_shard_0() -> None:
    # before the fix RecursionError escaped read_head() and the forwarding task died without a reply
    assert route_head(read_head(NESTED_ARRAY), 4) == 0
    assert route_head(read_head(HUGE_INT), 4) == 0


@pytest.mark.services
async def test_the_worker_answers_malformed_requests_with_client_errors(appliance: Any, nats_client: Any) -> None:
    log = appliance.settings.log_dir / "completion-worker.log"
    logged_before = log.stat().st_size
    for name, (payload, code) in MALFORMED.items():
        reply = json.loads((await nats_client.request(appliance.settings.completion_subject, payload,
                                                      timeout=30)).data)
        assert reply.get("error", {}).get("code") == code, (name, reply)
    await asyncio.sleep(0.5)  # the worker's log is written by its own process
    with log.open("rb") as f:
        f.seek(logged_before)
        assert b"Traceback" not in f.read()


@pytest.mark.services
async def test_the_gateway_answers_deeply_nested_json(appliance: Any, nats_client: Any) -> None:
    base = "test.malformed.complete"
    env = sharded_env(appliance.env, base)
    gateway = start("workers.gateway", env)
    worker = start("workers.completion", {**env, "CTXPRESS_SHARD": "0"})
    try:
        probe = json.dumps({**REQUEST, "line": 9}).encode()
        for _ in range(300):  # until both have subscribed: shard 0 answers the probe through the gateway
            try:
                msg = await nats_client.request(base, probe, timeout=2)
                if json.loads(msg.data).get("error", {}).get("code") == "cursor_out_of_range":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.2)
        else:
            pytest.fail("the gateway and shard 0 did not come up")
        for payload in (NESTED_ARRAY, NESTED_OBJECT, HUGE_INT):
            # before the fix: no reply (a timeout here)
            reply = json.loads((await nats_client.request(base, payload, timeout=30)).data)
            assert reply.get("error", {}).get("code") == "invalid_json", reply
    finally:
        for proc in (worker, gateway):
            proc.terminate()
            proc.wait(timeout=30)
