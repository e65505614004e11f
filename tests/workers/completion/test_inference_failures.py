"""A Triton that is down or hangs gives the IDE an error reply, never a hang."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.services


@contextmanager
def silent_server() -> Iterator[int]:
    """Accepts TCP connections and never says a word: a hung Triton."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@contextmanager
def worker(appliance: Any, subject: str, triton_url: str, timeout_s: float) -> Iterator[None]:
    env = {**appliance.env, "CTXPRESS_TRITON_URL": triton_url, "CTXPRESS_COMPLETION_SUBJECT": subject,
           "CTXPRESS_COMPLETION_QUEUE": subject, "CTXPRESS_TRITON_TIMEOUT_S": str(timeout_s),
           "CTXPRESS_WORKER_METRICS_PORT": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "workers.completion"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def wait_for_worker(nc: Any, subject: str) -> None:
    from nats.errors import NoRespondersError, TimeoutError

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            await nc.request(subject, b"{}", timeout=1)
            return
        except (NoRespondersError, TimeoutError):
            await asyncio.sleep(0.2)
    raise AssertionError("worker did not come up")


REQUEST = {"repository": "r", "path": "a.py", "text": "x = 1\ny = ", "line": 1, "column": 4, "max_tokens": 4}


@pytest.mark.parametrize("kind", ["down", "hung"])
async def test_unusable_triton_gives_an_error_reply(appliance: Any, nats_client: Any, kind: str) -> None:
    subject = f"test.{kind}.complete"
    with silent_server() as hung_port:
        port = free_port() if kind == "down" else hung_port
        with worker(appliance, subject, f"127.0.0.1:{port}", timeout_s=2.0):
            await wait_for_worker(nats_client, subject)
            started = time.perf_counter()
            reply = json.loads((await nats_client.request(subject, json.dumps(REQUEST).encode(), timeout=20)).data)
            elapsed = time.perf_counter() - started
    expected = {"down": {"inference_unavailable", "inference_timeout"}, "hung": {"inference_timeout"}}[kind]
    assert reply["error"]["code"] in expected, reply
    assert elapsed < 10
