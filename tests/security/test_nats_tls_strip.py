"""Issue 31, item 3: TLS cannot be stripped. nats-py upgrades to TLS only when the server's INFO says
``tls_required``: a server answering in the appliance's place (127.0.0.1 here) that greets with ``auth_required``
and no ``tls_required`` received CONNECT with the password in clear, although the client had a ``tls://`` URL and
the appliance's CA. A fake server records every byte it receives; no password may be among them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ctxpress.client import CompletionClient
from ctxpress_core import nats_connect
from ctxpress_core.errors import PartUnavailable
from ctxpress_core.identity import NatsCredentials
from ctxpress_core.tls import generate
from indexer import hook_publish

SECRET = "s3cret-password-that-must-never-travel-in-clear"
GREETING = {"server_id": "FAKE", "version": "2.10.0", "proto": 1, "headers": True, "max_payload": 1 << 20,
            "auth_required": True}  # and no tls_required


@dataclass
class FakeServer:
    port: int
    received: list[bytes] = field(default_factory=list)

    def everything(self) -> bytes:
        return b"".join(self.received)


@pytest.fixture
async def fake_server() -> AsyncIterator[FakeServer]:
    server_state = FakeServer(0)

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"INFO " + json.dumps(GREETING).encode() + b"\r\n")
        await writer.drain()
        try:
            while chunk := await asyncio.wait_for(reader.read(65536), timeout=1.0):
                server_state.received.append(chunk)
                if b"PING" in chunk:  # look like a server that took the CONNECT, so a leaky client goes on
                    writer.write(b"PONG\r\n")
                    await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    server_state.port = server.sockets[0].getsockname()[1]
    try:
        yield server_state
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("tls")
    generate(root, ["127.0.0.1"])
    return (root / "ca.pem").read_text()


@pytest.mark.parametrize("scheme", ["tls", "nats"])
async def test_an_editor_with_credentials_sends_no_password_to_a_server_without_tls(
        fake_server: FakeServer, ca_pem: str, scheme: str) -> None:
    # what `ctxpress complete` and the LSP do with a credentials file of a TLS appliance
    credentials = NatsCredentials(f"{scheme}://127.0.0.1:{fake_server.port}", "alice", SECRET, ca_pem)
    client = CompletionClient(credentials.nats_url, credentials.subject("complete"),
                              connect_options={**credentials.connect_options(), "reconnect_time_wait": 0.1})
    refused: Exception | None = None
    try:
        async with client:
            pass
    except PartUnavailable as exc:  # nats-py's connect loop gives up (NoServersError), having refused to log in
        refused = exc
    assert SECRET.encode() not in fake_server.everything()
    assert b"CONNECT" not in fake_server.everything() and refused is not None
    assert "did not offer TLS" in str(refused)  # what `ctxpress complete` says: not merely that NATS is down


async def test_the_one_connect_refuses_before_sending_anything(fake_server: FakeServer) -> None:
    with pytest.raises(nats_connect.TlsNotOffered):
        await nats_connect.connect(f"tls://127.0.0.1:{fake_server.port}", user="worker", password=SECRET,
                                   allow_reconnect=False, connect_timeout=2)
    await asyncio.sleep(0.1)
    assert fake_server.everything() == b""


async def test_a_credential_is_not_sent_in_clear_unless_configured_so(fake_server: FakeServer) -> None:
    # no TLS option, a nats:// URL: a service credential (an external NATS, CTXPRESS_NATS_TLS not false)
    with pytest.raises(nats_connect.TlsNotOffered):
        await nats_connect.connect(f"nats://worker:{SECRET}@127.0.0.1:{fake_server.port}", allow_reconnect=False,
                                   connect_timeout=2)
    with pytest.raises(nats_connect.TlsNotOffered):
        await nats_connect.connect(f"nats://127.0.0.1:{fake_server.port}", user="worker", password=SECRET,
                                   allow_reconnect=False, connect_timeout=2)
    await asyncio.sleep(0.1)
    assert fake_server.everything() == b""


async def test_plain_text_where_the_configuration_says_so(fake_server: FakeServer) -> None:
    # CTXPRESS_NATS_TLS=false (a network the operator trusts), or a credentials file issued without a CA: nothing
    # to strip, and the fake does hear the CONNECT, which also proves it would catch a leak
    assert NatsCredentials("nats://appliance:4222", "alice", SECRET).plaintext
    assert not NatsCredentials("tls://appliance:4222", "alice", SECRET).plaintext
    nc = await nats_connect.connect(f"nats://127.0.0.1:{fake_server.port}", user="worker", password=SECRET,
                                    allow_reconnect=False, connect_timeout=2, plaintext_credentials=True)
    await nc.close()
    assert SECRET.encode() in fake_server.everything()


@pytest.mark.parametrize("scheme", ["tls", "nats"])
async def test_the_git_hook_sends_no_password_to_a_server_without_tls(
        fake_server: FakeServer, ca_pem: str, scheme: str, tmp_path: Path) -> None:
    url = f"{scheme}://127.0.0.1:{fake_server.port}"
    loop = asyncio.get_running_loop()
    with pytest.raises((hook_publish.PublishError, OSError)):
        await loop.run_in_executor(None, hook_publish.connect, url, "alice", SECRET, ca_pem)
    await asyncio.sleep(0.2)
    assert SECRET.encode() not in fake_server.everything()
