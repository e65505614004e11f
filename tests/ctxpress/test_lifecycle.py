"""`ctxpress up` / `status` / `down` on a second, separate appliance: nothing is left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import appliance_env, ctxpress

pytestmark = pytest.mark.services


def live_processes_under(home: Path) -> list[str]:
    """Non-zombie processes whose command line or working files mention the state directory."""
    found = []
    needle = str(home)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except (OSError, IndexError):
            continue
        if state != "Z" and (needle in cmdline or f"CTXPRESS_HOME={needle}" in environ):
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def test_up_status_down_leaves_no_process(tmp_path: Path, model_path: Path) -> None:
    home = tmp_path / "home"
    env = appliance_env(home, model_path)
    try:
        up = ctxpress(env, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "all parts ready" in up.stdout
        status = ctxpress(env, "status", "--json")
        assert status.returncode == 0, status.stdout
        report = json.loads(status.stdout)
        assert {p["name"] for p in report["parts"] if p["running"]} == {
            "nats", "postgres", "triton", "completion-worker", "index-worker", "supervisor"}
        assert live_processes_under(home)
        again = ctxpress(env, "up")  # idempotent: already running parts are kept
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        down = ctxpress(env, "down")
    assert down.returncode == 0
    assert live_processes_under(home) == []
    assert ctxpress(env, "status").returncode == 3


def test_up_refuses_two_parts_on_one_port(tmp_path: Path, model_path: Path) -> None:
    env = appliance_env(tmp_path / "home", model_path)
    env["CTXPRESS_TRITON_GRPC_PORT"] = env["CTXPRESS_TRITON_HTTP_PORT"]
    up = ctxpress(env, "up")
    assert up.returncode == 1
    assert "CTXPRESS_TRITON_GRPC_PORT and CTXPRESS_TRITON_HTTP_PORT are both" in up.stderr
    assert live_processes_under(tmp_path / "home") == []
