"""Real services for the team-mode tests: an embedded PostgreSQL and the embedded nats-server started by
``NatsPart`` from the configuration team mode writes (no Triton, no model), or a whole team appliance."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxpress import team
from ctxpress.parts.nats_server import NatsPart
from ctxpress_core import identity
from ctxpress_core.settings import Settings
from db import team as store
from db.embedded import EmbeddedPostgres
from db.migrations import migrate
from tests.conftest import Appliance, appliance_env, ctxpress, free_ports, settings_from_env


@contextmanager
def embedded_postgres(root: Path) -> Iterator[str]:
    """A PostgreSQL of its own, migrated; yields its URL."""
    (port,) = free_ports(1)
    server = EmbeddedPostgres(root, "127.0.0.1", port)
    server.start(timeout_s=120)
    try:
        url = server.url()
        migrate(url)
        yield url
    finally:
        server.stop()


def team_settings(home: Path, database_url: str, **over: Any) -> Settings:
    nats_port, monitor_port = free_ports(2)
    values: dict[str, Any] = {"home": home, "team": True, "database_url": database_url, "nats_port": nats_port,
                              "nats_monitor_port": monitor_port, "worker_metrics_port": 0, **over}
    return Settings(**values)


@contextmanager
def running_nats(settings: Settings) -> Iterator[NatsPart]:
    """The embedded NATS of ``settings`` as it stands (no team set-up), for as long as the block runs."""
    part = NatsPart(settings)
    part.start(30)
    try:
        yield part
    finally:
        part.stop()


@contextmanager
def team_nats(settings: Settings) -> Iterator[NatsPart]:
    """The embedded NATS as `ctxpress up` starts it in team mode (credentials, authorization block, auth check)."""
    team.prepare_up(settings)
    with running_nats(settings) as part:
        team.after_part_started(settings, "nats")
        yield part


def add_developer(settings: Settings, name: str, repositories: list[str]) -> identity.NatsCredentials:
    """What `ctxpress users add` does, in-process."""
    password = identity.new_password()
    store.add_user(settings.effective_database_url(), name, identity.bcrypt_hash(password, 4), repositories)
    team.sync_authorization(settings, lambda line: None)
    return identity.NatsCredentials(settings.effective_nats_url(), name, password, identity.client_ca(settings))


def plain_text_login(url: str, user: str, password: str) -> tuple[dict[str, Any], bytes]:
    """A client that logs in without TLS, speaking the NATS protocol by hand (nats-py would upgrade on its own):
    the server's INFO, and what it answers to CONNECT + PING (``+PONG`` when it let the client in)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=5) as sock:
        greeting = sock.recv(65536)
        info = json.loads(greeting.split(b"\r\n", 1)[0][5:])
        connect = {"verbose": False, "pedantic": False, "user": user, "pass": password, "protocol": 1}
        try:
            sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
                if b"PONG" in answer:
                    break
        except (ConnectionResetError, BrokenPipeError, TimeoutError) as exc:
            answer = f"connection closed: {exc}".encode()
    return info, answer


@contextmanager
def team_appliance(home: Path, model: Path, **extra: str) -> Iterator[Appliance]:
    """A whole appliance in team mode started by `ctxpress up` (Triton and the model included), NATS on every
    address of this machine as a team would run it; `ctxpress down` at the end."""
    env = appliance_env(home, model, CTXPRESS_TEAM="true", CTXPRESS_NATS_BIND_HOST="0.0.0.0",
                        **{"CTXPRESS_CONSOLE_PORT": str(free_ports(1)[0]), **extra})
    started = ctxpress(env, "up")
    try:
        if started.returncode != 0:
            raise RuntimeError(f"ctxpress up (team mode) failed:\n{started.stdout}\n{started.stderr}")
        yield Appliance(env, settings_from_env(env))
    finally:
        ctxpress(env, "down")
