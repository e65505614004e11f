"""The console is a part of a team appliance: `ctxpress status` lists it with its address and whether it answers
(started as `ctxpress up` starts it, by its part, over a real PostgreSQL; no model needed), and a single-user
appliance has none. Bound beyond loopback it serves HTTPS only, with the team's certificate, and its session cookie
is `Secure` with the `__Host-` prefix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import aiohttp
import pytest
from aiohttp import ClientSession, CookieJar

from ctxpress.console.auth import hash_password
from ctxpress.parts import parts
from ctxpress.parts.console import ConsolePart
from ctxpress_core.tls import client_context, tls_dir
from db.console import add_admin
from tests.conftest import ctxpress, free_ports, settings_from_env
from tests.team_services import embedded_postgres

pytestmark = pytest.mark.services


def appliance_env(home: Path, database_url: str, team: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    names = ("NATS_PORT", "NATS_MONITOR_PORT", "POSTGRES_PORT", "TRITON_HTTP_PORT", "TRITON_GRPC_PORT",
             "TRITON_METRICS_PORT", "WORKER_METRICS_PORT", "CONSOLE_PORT")
    env.update({f"CTXPRESS_{name}": str(port) for name, port in zip(names, free_ports(len(names)), strict=True)})
    env.update({"CTXPRESS_HOME": str(home), "CTXPRESS_DATABASE_URL": database_url,
                "CTXPRESS_TEAM": "true" if team else "false"})
    return env


def status_rows(env: dict[str, str]) -> dict[str, dict[str, object]]:
    done = ctxpress(env, "status", "--json", timeout=120)
    assert done.returncode == 3, done.stderr  # the other parts are not running here
    return {row["name"]: row for row in json.loads(done.stdout)["parts"]}


def test_status_shows_the_console_of_a_team_appliance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with embedded_postgres(tmp_path / "pg") as url:
        single = appliance_env(tmp_path / "single", url, team=False)
        assert "console" not in status_rows(single)
        assert "console" not in [p.name for p in parts(settings_from_env(single))]

        env = appliance_env(tmp_path / "team", url, team=True)
        for name in [k for k in os.environ if k.startswith("CTXPRESS_")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)  # the part's process reads its settings from the environment
        settings = settings_from_env(env)
        (part,) = [p for p in parts(settings) if p.name == "console"]
        assert isinstance(part, ConsolePart)
        address = f"http://127.0.0.1:{env['CTXPRESS_CONSOLE_PORT']}/"
        assert status_rows(env)["console"]["running"] is False
        part.start(60)
        try:
            row = status_rows(env)["console"]
            assert (row["running"], row["address"], row["pid"]) == (True, address, part.pid())
        finally:
            part.stop()
        assert status_rows(env)["console"]["running"] is False


async def test_beyond_loopback_the_console_speaks_https_with_the_team_certificate_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    password = "tls test passphrase"
    with embedded_postgres(tmp_path / "pg") as url:
        add_admin(url, "lead", hash_password(password))
        env = {**appliance_env(tmp_path / "team", url, team=True), "CTXPRESS_CONSOLE_HOST": "0.0.0.0"}
        for name in [k for k in os.environ if k.startswith("CTXPRESS_")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings = settings_from_env(env)
        part = ConsolePart(settings)
        part.start(60)
        port = env["CTXPRESS_CONSOLE_PORT"]
        try:
            assert status_rows(env)["console"]["address"] == f"https://0.0.0.0:{port}/"
            team_ca = client_context((tls_dir(settings) / "ca.pem").read_text())
            async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as http:
                with pytest.raises(aiohttp.ClientError):  # no plain HTTP beside it
                    async with http.get(f"http://127.0.0.1:{port}/login") as response:
                        await response.read()
                with pytest.raises(aiohttp.ClientConnectorCertificateError):  # a certificate the team's CA signed
                    async with http.get(f"https://127.0.0.1:{port}/login") as response:
                        await response.read()
                base = f"https://127.0.0.1:{port}"
                async with http.post(f"{base}/login", data={"name": "lead", "password": password}, ssl=team_ca,
                                     allow_redirects=False) as signed_in:
                    assert signed_in.status == 303
                    (cookie,) = signed_in.headers.getall("Set-Cookie")
                async with http.get(f"{base}/", ssl=team_ca, allow_redirects=False) as overview:
                    assert overview.status == 200  # the cookie signs in over HTTPS
        finally:
            part.stop()
    attributes = [a.strip() for a in cookie.split(";")]
    assert attributes[0].startswith("__Host-ctxpress-console=")
    lowered = {a.lower() for a in attributes[1:]}
    assert {"secure", "httponly", "samesite=strict", "path=/"} <= lowered
    assert not [a for a in lowered if a.startswith("domain=")]  # __Host-: this host only
