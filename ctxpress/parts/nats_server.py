"""The NATS server part: its configuration file (listener, JetStream, team mode's users, TLS), or an
external NATS (cluster) that is only checked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ctxpress import nats_authorization
from ctxpress.parts.base import Part
from ctxpress.parts.probes import http_ok, port_open
from ctxpress_core import identity
from ctxpress_core.settings import Settings


def max_payload(settings: Settings) -> int:
    """Well above the worker's own request limit, so an oversized request (an editor's huge file) reaches the worker
    and gets a structured error rather than a refusal from NATS."""
    return max(2 * settings.max_request_bytes, 8 << 20)


class NatsPart(Part):
    name = "nats"

    @property
    def external(self) -> bool:
        return self.settings.nats_url is not None

    def address(self) -> str:
        return self.settings.effective_nats_url()

    def argv(self) -> list[str]:
        s = self.settings
        config = s.state_dir / "nats" / "nats-server.conf"
        config.parent.mkdir(parents=True, exist_ok=True)
        # A config file because max_payload has no command-line flag.
        # Team mode: the users and their permissions, a file of its own that `ctxpress users` rewrites
        # (nats-server resolves the include next to this file).
        users = f'include "{nats_authorization.ensure_authorization_file(s).name}"\n' if identity.team_mode(s) else ""
        tls = ""
        if identity.tls_on(s):  # every client, the workers on loopback too: one listener, one rule
            from ctxpress_core.tls import ensure_tls_files

            files = ensure_tls_files(s)
            tls = (f'tls {{ cert_file: {json.dumps(str(files.cert))}, key_file: {json.dumps(str(files.key))}, '
                   "timeout: 2 }\n")
        config.write_text(
            f'server_name: "ctxpress"\n'
            f'listen: "{s.nats_bind_host or s.bind_host}:{s.nats_port}"\n'
            f'http: "{identity.monitor_host(s)}:{s.nats_monitor_port}"\n'
            f"max_payload: {max_payload(s)}\n"
            f'jetstream {{ store_dir: "{s.state_dir / "nats"}" }}\n'
            f"{users}{tls}"
        )
        binary = Path(sys.executable).parent / "nats-server"
        return [str(binary), "-c", str(config)]

    def ready(self) -> bool:
        if self.external:  # a cluster answers while any of its nodes does
            return any(port_open(host, int(port)) for host, _, port in
                       (url.split("://")[-1].rpartition(":") for url in self.settings.nats_servers()))
        return http_ok(f"http://{identity.monitor_host(self.settings)}:{self.settings.nats_monitor_port}"
                        "/healthz?js-enabled-only=true")
