"""The NATS client the CLI and the benchmarks use: a worker that never answers gives an error reply
shaped like the worker's own, after the request's deadline, not an exception."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ctxpress.client import REPLY_MARGIN_S, CompletionClient
from ctxpress_core.wire.v1 import CompletionRequest

pytestmark = pytest.mark.services


async def test_no_reply_within_the_deadline_is_an_error_reply(appliance: Any, nats_client: Any) -> None:
    silent = "ctxpress.test.silent"

    async def never_answer(_msg: Any) -> None:
        return None

    await nats_client.subscribe(silent, cb=never_answer)
    await nats_client.flush()
    request = CompletionRequest(repository="r", path="a.py", text="x = 1\n", line=0, column=5, timeout_ms=200)
    async with CompletionClient(appliance.settings.effective_nats_url(), silent) as client:
        started = time.monotonic()
        reply = await client.complete(request)
        waited = time.monotonic() - started
    assert reply["error"]["code"] == "no_reply", reply
    assert waited >= 0.2 + REPLY_MARGIN_S - 0.5
