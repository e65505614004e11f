"""The files a team deployment across machines runs from (``ctxpress deploy setup``, ``ctxpress deploy roles``).

The compose and Kubernetes files (``infra/``) and the local topology (``ctxpress.topology``) mount the same files,
all under one state directory (``CTXPRESS_HOME``) that the team's admin keeps:

- ``tls/``: a private CA and one certificate for every NATS node (clients and routes speak TLS; ``ca-key.pem``
  never leaves the admin's machine);
- ``nats/<node>.conf`` and ``nats/authorization.conf``: each node's configuration and the users it includes
  (``ctxpress users`` rewrites the block; reload the nodes after it);
- ``team/<service>.json``: the NATS credentials of the completion workers, the index workers and the gateway;
- ``database/<service>.url``: each service's PostgreSQL role (``db.roles``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ctxpress import nats_authorization
from ctxpress.parts.nats_server import max_payload
from ctxpress_core import identity
from ctxpress_core.private_files import write_private_file
from ctxpress_core.settings import Settings
from ctxpress_core.tls import TlsFiles, generate, tls_dir

DATABASE_DIR = "database"
# The first line of each node's configuration: how the nodes of this deployment are found again (node_names).
NODE_CONFIG_HEADER = "# Written by `ctxpress deploy setup`; rerun it rather than editing."
# NATS keeps its monitoring endpoint (connections, subjects) on loopback: health checks run beside the server.
MONITOR_HOST = "127.0.0.1"


@dataclass(frozen=True)
class NatsNode:
    """One nats-server of the cluster, as the other nodes and the clients reach it."""

    name: str
    host: str
    client_port: int = 4222
    cluster_port: int = 6222
    monitor_port: int = 8222

    @classmethod
    def parse(cls, spec: str) -> NatsNode:
        """``name=host[:client_port[:cluster_port[:monitor_port]]]``"""
        name, sep, where = spec.partition("=")
        if not sep or not name or not where:
            raise ValueError(f"a NATS node is name=host[:client[:cluster[:monitor]]], not {spec!r}")
        host, *ports = where.split(":")
        if len(ports) > 3 or not all(p.isdigit() for p in ports):
            raise ValueError(f"a NATS node is name=host[:client[:cluster[:monitor]]], not {spec!r}")
        return cls(identity.validate_name(name), host, *(int(p) for p in ports))

    @property
    def url(self) -> str:
        return f"tls://{self.host}:{self.client_port}"


def cluster_url(nodes: list[NatsNode]) -> str:
    """What the services connect to: every node, so losing one loses no client."""
    return ",".join(node.url for node in nodes)


def team_settings(settings: Settings, nodes: list[NatsNode]) -> Settings:
    """The settings every service of the deployment shares: team mode, the cluster's URLs, its CA."""
    return settings.model_copy(update={"team": True, "nats_url": cluster_url(nodes),
                                       "nats_tls_ca": tls_dir(settings) / "ca.pem"})


def ensure_cluster_tls(settings: Settings, names: list[str]) -> TlsFiles:
    """One certificate for all nodes (they are one service to a client), valid for routes too (each node is a TLS
    client of the others). Kept when it exists; ``tls/`` removed, the next run makes a new CA."""
    root = tls_dir(settings)
    files = TlsFiles(root / "server.pem", root / "server-key.pem", root / "ca.pem")
    if not files.ca.exists():
        generate(root, list(dict.fromkeys(names)), client_auth=True)
    return files


def node_config(node: NatsNode, nodes: list[NatsNode], *, listen_host: str, root: Path, store_dir: Path,
                max_payload: int) -> str:
    """The nats-server configuration of one node: client TLS and users, JetStream, TLS routes to the others.
    ``root``: where this state directory is mounted for the server; ``store_dir``: its JetStream files."""
    tls = {"cert_file": str(root / "tls" / "server.pem"), "key_file": str(root / "tls" / "server-key.pem"),
           "ca_file": str(root / "tls" / "ca.pem")}
    routes = [f"tls://{other.host}:{other.cluster_port}" for other in nodes if other.name != node.name]
    # no_advertise: clients keep the URLs they were given (the cluster's internal names mean nothing outside it)
    cluster = {"name": "ctxpress", "listen": f"{listen_host}:{node.cluster_port}", "routes": routes,
               "no_advertise": True, "tls": {**tls, "verify": True, "timeout": 5}}
    return (f"{NODE_CONFIG_HEADER}\n"
            f"server_name: {json.dumps(node.name)}\n"
            f"listen: {json.dumps(f'{listen_host}:{node.client_port}')}\n"
            f"http: {json.dumps(f'{MONITOR_HOST}:{node.monitor_port}')}\n"
            f"max_payload: {max_payload}\n"
            f"jetstream {{ store_dir: {json.dumps(str(store_dir))} }}\n"
            f"tls {json.dumps({**tls, 'timeout': 5})}\n"
            f"cluster {json.dumps(cluster)}\n"
            f'include "{identity.AUTHORIZATION_FILE}"\n')


def setup(settings: Settings, nodes: list[NatsNode], *, listen_host: str = "0.0.0.0", mounted_at: Path | None = None,
          store_dir: Path | None = None, names: tuple[str, ...] = ()) -> list[Path]:
    """Write (or refresh) the deployment's TLS, NATS and credentials files; returns what it wrote. Idempotent:
    existing credentials and certificates are kept, so running it again after a change breaks no client."""
    if len({node.name for node in nodes}) != len(nodes) or not nodes:
        raise ValueError("give each NATS node once, with a name of its own")
    shared = team_settings(settings, nodes)
    tls = ensure_cluster_tls(shared, ["localhost", "127.0.0.1", *(node.host for node in nodes), *names])
    services = identity.ensure_service_credentials(shared)
    written = [tls.ca, tls.cert, tls.key, *(identity.service_credentials_path(shared, name) for name in services)]
    authorization = nats_authorization.authorization_path(shared)
    if not authorization.exists():  # `ctxpress users` keeps it from then on
        nats_authorization.write_authorization(shared, [])
    written.append(authorization)
    root = mounted_at or shared.state_dir
    for node in nodes:
        path = authorization.parent / f"{node.name}.conf"
        path.write_text(node_config(node, nodes, listen_host=listen_host, root=root,
                                    store_dir=store_dir or shared.state_dir / "jetstream" / node.name,
                                    max_payload=max_payload(shared)))
        written.append(path)
    return written


def node_names(settings: Settings) -> list[str]:
    """The NATS nodes whose configuration ``setup`` wrote here. They run elsewhere and read the authorization block
    only when reloaded, so whatever rewrites it names them."""
    names = []
    for path in sorted(nats_authorization.authorization_path(settings).parent.glob("*.conf")):
        with path.open(errors="replace") as f:
            if f.readline().rstrip("\n") == NODE_CONFIG_HEADER:
                names.append(path.stem)
    return names


def database_url_path(settings: Settings, service: str) -> Path:
    return settings.state_dir / DATABASE_DIR / f"{service}.url"


def roles(settings: Settings, host: str | None = None) -> list[Path]:
    """Create or update each service's PostgreSQL role with the superuser URL of the settings, and write each
    service's URL to ``database/<service>.url`` (0600). A role's password is kept once written."""
    from sqlalchemy.engine import make_url

    from db.roles import ROLE_NAMES, ensure_roles, role_url

    superuser = settings.effective_database_url()
    known: dict[str, str | None] = {}
    for service in ROLE_NAMES:
        path = database_url_path(settings, service)
        known[service] = make_url(path.read_text().strip()).password if path.exists() else None
    passwords = ensure_roles(superuser, known)
    written = []
    for service, password in passwords.items():
        path = database_url_path(settings, service)
        write_private_file(path, role_url(superuser, ROLE_NAMES[service], password, host) + "\n")
        written.append(path)
    return written
