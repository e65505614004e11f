"""The team topology, as data: which services run, what each runs and which of the deployment's files it reads.

One description for the three places that run the topology: ``infra/docker-compose.yml``, ``infra/k8s/`` and the
local processes (``ctxpress.topology``); ``tests/infra`` checks the compose and Kubernetes files against it. The
files are the ones ``ctxpress deploy setup`` and ``ctxpress deploy roles`` write under the admin's state directory
(``ctxpress.deployment``); paths here are relative to it. A service reads only its own: its NATS credentials, its
database role, the TLS files it needs, never the CA's key.

Names are compose's (and the local processes'). Kubernetes runs each ``workload`` as a StatefulSet (``stateful``:
pod ``<workload>-<ordinal>``, so the NATS nodes are nats-0..2 there) or a Deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxpress_core.identity import GATEWAY_USER, INDEXER_USER, SERVICE_USERS, USER_KIND_DEVELOPER, WORKER_USER
from ctxpress_core.settings import Settings

# Where a container sees the state directory: CTXPRESS_HOME there, and `ctxpress deploy setup --mounted-at`.
HOME = "/team"
# Where a container sees the secrets its operator gives it (a compose secret, a Kubernetes Secret's key).
SECRETS_DIR = "/run/secrets"
# The bridge's NATS user: a developer's own credentials file (`ctxpress users add`), handed over as a secret.
DEVELOPER = USER_KIND_DEVELOPER
DEVELOPER_CREDENTIALS_SECRET = "bridge-nats-credentials"
# Where the admin's `ctxpress users add --out` writes the developers' credentials files.
USERS_DIR = "users"

NATS_SERVER_TLS = ("server.pem", "server-key.pem", "ca.pem")  # tls/: the nodes' certificate, its key, the CA
CLIENT_TLS = ("ca.pem",)  # tls/: what a client verifies the nodes with


def _default(name: str) -> int:
    value = Settings.model_fields[name].default
    assert isinstance(value, int)
    return value


NATS_CLIENT_PORT = _default("nats_port")
BRIDGE_PORT = _default("http_port")
WORKER_METRICS_PORT = _default("worker_metrics_port")
TRITON_HTTP_PORT = _default("triton_http_port")
TRITON_GRPC_PORT = _default("triton_grpc_port")
TRITON_METRICS_PORT = _default("triton_metrics_port")


@dataclass(frozen=True)
class Service:
    name: str
    workload: str | None  # the Kubernetes StatefulSet or Deployment; None: not run in the cluster
    ordinal: int = 0  # its pod's index in a StatefulSet
    stateful: bool = False
    # The argv; () runs the image's own. "{home}": HOME; "{node}": this NATS node's name (its pod's in Kubernetes).
    command: tuple[str, ...] = ()
    nats_user: str | None = None  # a service user (team/<user>.json) or DEVELOPER
    database_role: str | None = None  # database/<role>.url, written by `ctxpress deploy roles`
    tls: tuple[str, ...] = ()  # the files of tls/ it reads
    nats_config: bool = False  # nats/: its node's configuration and the users it includes (reloaded, so a directory)
    admin_dirs: tuple[str, ...] = ()  # the admin's: directories it rewrites (users, roles, credentials handed out)
    secrets: tuple[str, ...] = ()  # SECRETS_DIR/<name>, from the operator, not from the kit
    published: tuple[int, ...] = ()  # container ports reachable from beyond the host (the cluster)
    metrics_port: int | None = None  # Prometheus /metrics
    shard: int | None = None  # a completion worker's CTXPRESS_SHARD
    engine: str | None = None  # the Triton it talks to (a service's name)
    profile: str | None = None  # started only when asked for (a compose profile)

    def argv(self, node: str | None = None, home: str = HOME) -> list[str]:
        return [arg.format(home=home, node=node or self.name) for arg in self.command]

    @property
    def nats_credentials(self) -> str | None:
        """Its credentials file in the state directory; a developer's comes as a secret instead."""
        return f"team/{self.nats_user}.json" if self.nats_user in SERVICE_USERS else None

    @property
    def database_url(self) -> str | None:
        return f"database/{self.database_role}.url" if self.database_role else None

    @property
    def home_files(self) -> frozenset[str]:
        """Everything of the state directory it mounts (files and directories), relative to it."""
        found = {self.nats_credentials, self.database_url, *(f"tls/{name}" for name in self.tls)}
        if self.nats_config:
            found.add("nats")
        inside = {path for path in found if path and any(path.startswith(f"{d}/") for d in self.admin_dirs)}
        return frozenset(path for path in found | set(self.admin_dirs) if path and path not in inside)


NATS_NODES = 3
SHARDS = 2

SERVICES: tuple[Service, ...] = (
    *(Service(f"nats-{i + 1}", "nats", i, stateful=True, command=("nats-server", "-c", "{home}/nats/{node}.conf"),
              tls=NATS_SERVER_TLS, nats_config=True, published=(NATS_CLIENT_PORT,)) for i in range(NATS_NODES)),
    Service("postgres", "postgres", stateful=True, secrets=("postgres-password",)),
    *(Service(f"triton-{i}", "triton", i, stateful=True,
              command=("tritonserver", "--model-repository=/models", f"--http-port={TRITON_HTTP_PORT}",
                       f"--grpc-port={TRITON_GRPC_PORT}", f"--metrics-port={TRITON_METRICS_PORT}",
                       "--allow-metrics=true", "--allow-gpu-metrics=true", "--disable-auto-complete-config"),
              metrics_port=TRITON_METRICS_PORT) for i in range(SHARDS)),
    Service("gateway", "gateway", command=("ctxpress", "gateway"), nats_user=GATEWAY_USER, tls=CLIENT_TLS),
    *(Service(f"completion-worker-{i}", "completion-worker", i, stateful=True,
              command=("ctxpress", "worker", "completion"), nats_user=WORKER_USER, database_role="completion",
              tls=CLIENT_TLS, metrics_port=WORKER_METRICS_PORT, shard=i, engine=f"triton-{i}") for i in range(SHARDS)),
    # the embedder runs on the first engine
    Service("index-worker", "index-worker", command=("ctxpress", "worker", "index"), nats_user=INDEXER_USER,
            database_role="indexer", tls=CLIENT_TLS, engine="triton-0"),
    Service("bridge", "bridge", command=("ctxpress", "serve-http"), nats_user=DEVELOPER, tls=CLIENT_TLS,
            secrets=(DEVELOPER_CREDENTIALS_SECRET, "bridge-http-token"), published=(BRIDGE_PORT,), profile="bridge"),
    # `ctxpress users ...` and `ctxpress deploy roles` (with the superuser's password); in Kubernetes the admin runs
    # them from their own machine through a port-forward.
    Service("admin", None, command=("ctxpress", "users", "list"), database_role="admin", tls=CLIENT_TLS,
            admin_dirs=("nats", "team", "database", USERS_DIR), secrets=("postgres-password",), profile="admin"),
    Service("prometheus", "prometheus"),
    Service("grafana", "grafana", secrets=("grafana-admin-password",)),
)


def service(name: str) -> Service:
    return next(s for s in SERVICES if s.name == name)


def nats_nodes() -> list[Service]:
    return [s for s in SERVICES if s.nats_config]


def completion_workers() -> list[Service]:
    return [s for s in SERVICES if s.shard is not None]
