"""ctxpress_core.nats_connect.connect with allow_reconnect=False: one attempt and its retry, then the error. No
server: a free port refuses."""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.errors import NoServersError

from ctxpress.topology import free_ports
from ctxpress_core import nats_connect


async def test_a_connection_that_must_not_retry_gives_up_at_once_and_quietly(caplog: pytest.LogCaptureFixture) -> None:
    (port,) = free_ports(1)
    caplog.set_level(logging.DEBUG, logger="nats")
    started = asyncio.get_running_loop().time()
    with pytest.raises(NoServersError):
        # max_reconnect_attempts=0 is what the probes pass: nats-py 2.16 alone retries it every 2 s, forever
        await asyncio.wait_for(nats_connect.connect(f"nats://127.0.0.1:{port}", connect_timeout=1,
                                                    max_reconnect_attempts=0, allow_reconnect=False), 30)
    assert asyncio.get_running_loop().time() - started < 5
    assert not [r for r in caplog.records if r.name.startswith("nats")], caplog.text


def test_options_that_allow_reconnecting_are_left_as_they_are() -> None:
    options = {"max_reconnect_attempts": -1, "reconnect_time_wait": 2}
    assert nats_connect.one_attempt(options) == options
