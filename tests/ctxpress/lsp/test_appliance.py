"""The editor's NATS client (``ctxpress lsp``, ``ctxpress serve-http``) against real nats-servers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from ctxpress.lsp.appliance import Appliance, Unreachable
from tests.conftest import free_port
from tests.kinds import needs


@pytest.fixture
@needs("services")
async def live_nats() -> AsyncIterator[str]:
    port = free_port()
    server = await asyncio.create_subprocess_exec(str(Path(sys.executable).parent / "nats-server"), "-a", "127.0.0.1",
                                                  "-p", str(port), stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            nc = await nats.connect(url, connect_timeout=1, max_reconnect_attempts=0)
            await nc.close()
            break
        except Exception:
            assert time.monotonic() < deadline, "nats-server did not start"
            await asyncio.sleep(0.2)
    try:
        yield url
    finally:
        server.terminate()
        await server.wait()


async def test_a_cluster_list_reaches_the_server_that_is_up(live_nats: str) -> None:
    responder = await nats.connect(live_nats)

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b'{"completion": "x"}')

    await responder.subscribe("ctxpress.test.echo", cb=answer)
    await responder.flush()
    states: list[tuple[bool, str]] = []
    appliance = Appliance(f"nats://127.0.0.1:{free_port()},{live_nats}", {}, lambda up, why: states.append((up, why)))
    try:
        reply = await appliance.request("ctxpress.test.echo", b"{}", timeout_s=5)
        assert reply == {"completion": "x"}
        assert states == []  # the first contact succeeded: nothing to report
    finally:
        await appliance.close()
        await responder.close()


async def test_a_list_with_no_server_up_is_unreachable() -> None:
    states: list[tuple[bool, str]] = []
    appliance = Appliance(f"nats://127.0.0.1:{free_port()},nats://127.0.0.1:{free_port()}", {},
                          lambda up, why: states.append((up, why)))
    try:
        with pytest.raises(Unreachable):
            await appliance.request("ctxpress.test.echo", b"{}", timeout_s=2)
        assert [up for up, _ in states] == [False]
    finally:
        await appliance.close()
