"""Team mode's nats-server side: the authorization block (``ctxpress.nats_authorization``) synced from
PostgreSQL and reloaded, the NATS greeting checked, and what ``ctxpress up`` does for team mode. Identity
itself (subjects, credentials, what a client connects with) is ``ctxpress_core.identity``, shared with the
workers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxpress.deployment import node_names
from ctxpress.nats_authorization import TeamUser, ensure_authorization_file, write_authorization
from ctxpress.parts.nats_server import NatsPart
from ctxpress_core.identity import (
    TeamConfigError,
    ensure_service_credentials,
    monitor_host,
    service_credentials,
    team_mode,
    tls_on,
)
from ctxpress_core.settings import Settings


def sync_authorization(settings: Settings, report: Callable[[str], None] = print) -> Path:
    """Rewrite the authorization block from PostgreSQL and have the embedded NATS reload it (no restart: the
    connections of users still allowed stay up; those of removed users are closed by nats-server). The nodes of a
    deployment (``ctxpress deploy setup``) are not reached from here: they are named, for the operator to reload."""
    from db.team import password_hashes

    users = [TeamUser(name, hashed, kind) for name, hashed, kind in password_hashes(settings.effective_database_url())]
    path = write_authorization(settings, users)
    nodes = node_names(settings)
    if nodes:
        report(f"  reload the NATS nodes, which read {path.name} only then (kill -s HUP, or nats-server --signal "
               f"reload): {', '.join(nodes)}")
    elif settings.nats_url is not None:
        report(f"  NATS is external: include {path} in its configuration and reload it (nats-server --signal reload)")
    elif team_mode(settings) and reload_nats(settings):
        report(f"  NATS reloaded {path.name}")
    return path


def _config_load_time(varz_url: str) -> str | None:
    try:
        with urllib.request.urlopen(varz_url, timeout=2.0) as response:
            return str(json.loads(response.read()).get("config_load_time"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def signal_reload(pid: int, monitor_url: str, timeout_s: float = 10.0) -> bool:
    """SIGHUP to the nats-server ``pid``, then wait until its monitoring endpoint (``http://host:port``) says it
    loaded the config again; False when it did not within ``timeout_s``."""
    varz = f"{monitor_url}/varz"
    before = _config_load_time(varz)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = _config_load_time(varz)
        if now is not None and now != before:
            return True
        time.sleep(0.05)
    return False


def reload_nats(settings: Settings, timeout_s: float = 10.0) -> bool:
    """SIGHUP to the embedded nats-server, then wait until it says it loaded the config again. False when it is
    not running (it reads the file when it starts); ``TeamConfigError`` when it did not take the new config."""
    pid = NatsPart(settings).pid()
    if pid is None:
        return False
    if signal_reload(pid, f"http://{monitor_host(settings)}:{settings.nats_monitor_port}", timeout_s):
        return True
    raise TeamConfigError(f"nats-server (pid {pid}) did not reload its configuration in {timeout_s:.0f}s; "
                          f"see {settings.log_dir / 'nats.log'}")


def server_info(url: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """The INFO greeting of the (first) NATS server of ``url`` (sent in plain text before any TLS)."""
    server = url.split(",")[0].strip()
    parts = urlsplit(server if "://" in server else f"nats://{server}")
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=timeout_s) as sock:
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0]
    if not line.startswith(b"INFO "):
        raise TeamConfigError(f"NATS at {server} did not greet with INFO: {line[:60]!r}")
    return dict(json.loads(line[5:]))


def server_requires_auth(url: str, timeout_s: float = 2.0) -> bool:
    """Whether the (first) NATS server of ``url`` says ``auth_required`` in its INFO greeting."""
    return bool(server_info(url, timeout_s).get("auth_required"))


# --- `ctxpress up` in team mode ----------------------------------------------------------------------------


def prepare_up(settings: Settings) -> None:
    """Before any part starts: the credentials the parts will use, and the block the embedded NATS includes."""
    ensure_service_credentials(settings)  # creates the TLS files too, when TLS is on
    if settings.nats_url is None:
        ensure_authorization_file(settings)
    else:
        service_credentials(settings)  # the workers' credential for an external NATS must be there


def after_part_started(settings: Settings, name: str, report: Callable[[str], None] = print) -> None:
    if name == "nats":
        url = settings.effective_nats_url()
        try:
            info = server_info(url)
        except OSError as exc:
            raise TeamConfigError(f"cannot read the greeting of NATS at {url}: {exc}") from None
        hint = " (started before team mode was on? `ctxpress down` first)" if settings.nats_url is None else ""
        if not info.get("auth_required"):
            raise TeamConfigError(f"team mode: NATS at {url} lets clients in without authentication; refusing to "
                                  f"serve a team on it{hint} (see docs/security.md)")
        if tls_on(settings) and not info.get("tls_required"):
            raise TeamConfigError(f"team mode: NATS at {url} speaks plain text; refusing to serve a team on it{hint} "
                                  "(see docs/security.md)")
    elif name == "postgres" and settings.nats_url is None:
        sync_authorization(settings, report)  # the developers added while the appliance was down
