"""The team topology of ``infra/`` as processes on one machine: a three-node NATS cluster with TLS and users,
PostgreSQL with a role per service, one engine per completion shard, the shards' workers, the gateway and the
index worker, each started as its container is (the same command, its own credentials and role, files from
``ctxpress deploy setup``).

What the compose and Kubernetes files describe, run where containers cannot be: the topology test and the
``team`` benchmark scenario start it, kill parts of it with SIGKILL and measure what a team sees.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ctxpress import deployment
from ctxpress import topology_spec as spec
from ctxpress.parts.probes import http_ok
from ctxpress.parts.triton import engine_ready
from ctxpress.team import signal_reload
from ctxpress_core import identity
from ctxpress_core.settings import Settings

PYTHON = sys.executable
START_TIMEOUT_S = 600.0  # an engine loads its model on two busy cores


def free_ports(count: int) -> list[int]:
    """Distinct free ports: all sockets stay bound until every port is chosen (one at a time, the kernel may hand
    out the same port twice, and tritonserver refuses equal ports)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Process:
    """One service: its command, its environment, its log, and how to tell it is ready."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready: Callable[[Process], bool]
    popen: subprocess.Popen[bytes] | None = None
    log_offset: int = 0  # where this run's lines begin in the log

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready(self):
            if not self.alive():
                raise RuntimeError(f"{self.name} exited while starting; see {self.log}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s; see {self.log}:\n{self.tail()}")
            time.sleep(0.2)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
            self.popen.wait(30)

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class LocalTopology:
    """``root``: where everything lives; ``model``: the GGUF every engine loads."""

    root: Path
    model: Path
    report: Callable[[str], None] = print
    processes: dict[str, Process] = field(default_factory=dict)
    nodes: list[deployment.NatsNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home = self.root / "team"  # the admin's state directory: the files the containers mount
        self.postgres = None

    # --- the admin's side ------------------------------------------------------------------------------

    def admin_settings(self) -> Settings:
        return deployment.team_settings(Settings(home=self.home, database_url_file=self.home / "database" /
                                                 "admin.url"), self.nodes)

    def admin_env(self) -> dict[str, str]:
        s = self.admin_settings()
        return {**self._base_env(), "CTXPRESS_HOME": str(self.home), "CTXPRESS_TEAM": "true",
                "CTXPRESS_NATS_URL": str(s.nats_url), "CTXPRESS_NATS_TLS_CA": str(s.nats_tls_ca),
                "CTXPRESS_DATABASE_URL_FILE": str(self.home / "database" / "admin.url")}

    def ctxpress(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """The CLI as the team's admin runs it (``docker compose run --rm admin ctxpress …``)."""
        return subprocess.run([PYTHON, "-m", "ctxpress.cli", *args], env=env or self.admin_env(),
                              capture_output=True, text=True, timeout=300)

    def add_user(self, name: str, repositories: list[str], kind: str = "add") -> identity.NatsCredentials:
        """``ctxpress users add|hooks``, then every node reloads its authorization block (SIGHUP)."""
        out = self.root / "users" / f"{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        result = self.ctxpress("users", kind, name, "--repos", ",".join(repositories), "--out", str(out))
        if result.returncode != 0:
            raise RuntimeError(f"ctxpress users {kind} {name}: {result.stderr}")
        self.reload_nats()
        return identity.load_credentials(out)

    def reload_nats(self) -> None:
        for node in self.nodes:
            process = self.processes[node.name]
            if process.popen is not None and process.alive():
                signal_reload(process.popen.pid, f"http://127.0.0.1:{node.monitor_port}")

    # --- the services ----------------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
        return {**env, "PYTHONUNBUFFERED": "1"}

    def service_env(self, service: spec.Service) -> dict[str, str]:
        """A container's environment: a home of its own, the deployment's files it mounts for its credentials and
        role (``topology_spec``), the engine of its shard."""
        s = self.admin_settings()
        env = {**self._base_env(), "CTXPRESS_HOME": str(self.root / "services" / service.name), "CTXPRESS_TEAM": "true",
               "CTXPRESS_NATS_URL": str(s.nats_url), "CTXPRESS_NATS_TLS_CA": str(s.nats_tls_ca),
               "CTXPRESS_MODEL_PATH": str(self.model), "CTXPRESS_SHARDS": str(len(spec.completion_workers())),
               "CTXPRESS_INDEX_STREAM_REPLICAS": str(min(3, len(self.nodes))),
               "CTXPRESS_WORKER_METRICS_PORT": "0", "CTXPRESS_N_CTX": "2048",
               "CTXPRESS_RETRIEVAL_TIMEOUT_MS": "3000"}
        if service.nats_credentials is not None:
            env["CTXPRESS_NATS_CREDENTIALS"] = str(self.home / service.nats_credentials)
        if service.database_url is not None:
            env["CTXPRESS_DATABASE_URL_FILE"] = str(self.home / service.database_url)
        if service.shard is not None:
            env["CTXPRESS_SHARD"] = str(service.shard)
        if service.engine is not None:
            env["CTXPRESS_TRITON_URL"] = self.engine_url(service.engine)
        return env

    def _add(self, process: Process) -> Process:
        self.processes[process.name] = process
        return process

    def start(self) -> None:
        """Everything ``topology_spec`` lists but what a container image brings (Prometheus, Grafana) and what is
        started only when asked for (the bridge, the admin's one-shot): PostgreSQL, the NATS nodes, one engine per
        shard (the CPU engine standing in for Triton with TensorRT-LLM), the gateway, the workers."""
        from db.embedded import EmbeddedPostgres

        started = time.monotonic()
        engines = [s for s in spec.SERVICES if s.name.startswith("triton-")]
        nats_nodes = spec.nats_nodes()
        ports = iter(free_ports(3 * len(nats_nodes) + 1 + 3 * len(engines)))
        self.nodes = [deployment.NatsNode(node.name, "127.0.0.1", next(ports), next(ports), next(ports))
                      for node in nats_nodes]
        self.report(f"topology: PostgreSQL, {len(self.nodes)} NATS nodes, {len(engines)} shards under {self.root}")
        self.postgres = EmbeddedPostgres(self.root / "postgres", "127.0.0.1", next(ports))
        self.postgres.start(timeout_s=120)
        deployment.setup(Settings(home=self.home), self.nodes, listen_host="127.0.0.1")
        deployment.roles(Settings(home=self.home, database_url=self.postgres.url()))
        for node, service in zip(self.nodes, nats_nodes, strict=True):
            argv = service.argv(home=str(self.home))
            monitor = f"http://127.0.0.1:{node.monitor_port}/healthz?js-enabled-only=true"
            self._add(Process(node.name, [str(Path(PYTHON).parent / argv[0]), *argv[1:]], self._base_env(),
                              self.root / "logs" / f"{node.name}.log", lambda _, url=monitor: http_ok(url))).start()
        for node in self.nodes:
            self.processes[node.name].wait_ready(60)
        for engine in engines:
            http, grpc, metrics = next(ports), next(ports), next(ports)
            env = {**self._base_env(), "CTXPRESS_HOME": str(self.root / "services" / engine.name),
                   "CTXPRESS_MODEL_PATH": str(self.model), "CTXPRESS_N_CTX": "2048",
                   "CTXPRESS_TRITON_HTTP_PORT": str(http), "CTXPRESS_TRITON_GRPC_PORT": str(grpc),
                   "CTXPRESS_TRITON_METRICS_PORT": str(metrics)}
            self._add(Process(engine.name, [PYTHON, "-m", "serving.engine.triton_server"], env,
                              self.root / "logs" / f"{engine.name}.log",
                              lambda _, port=http: engine_ready(f"http://127.0.0.1:{port}"))).start()
        for engine in engines:
            self.processes[engine.name].wait_ready(START_TIMEOUT_S)
        self.report(f"  NATS, PostgreSQL and {len(engines)} engines ready after {time.monotonic() - started:.0f} s")
        ready_line = {"gateway": "gateway: ", "worker": "index worker on stream"}
        services = [s for s in spec.SERVICES if s.command[:1] == ("ctxpress",) and s.profile is None]
        for service in services:
            needle = "completion worker listening" if service.shard is not None else ready_line[service.command[1]]
            self._add(Process(service.name, [PYTHON, "-m", "ctxpress.cli", *service.command[1:]],
                              self.service_env(service), self.root / "logs" / f"{service.name}.log",
                              _logged(needle))).start()
        for service in services:
            self.processes[service.name].wait_ready(START_TIMEOUT_S)
        self.report(f"  services ready after {time.monotonic() - started:.0f} s")

    @property
    def shards(self) -> int:
        return len(spec.completion_workers())

    def engine_url(self, engine: str) -> str:
        return f"127.0.0.1:{self.processes[engine].env['CTXPRESS_TRITON_GRPC_PORT']}"

    def stop(self) -> None:
        for process in reversed(self.processes.values()):  # the services, then the engines, then NATS
            process.stop()
        if self.postgres is not None:
            self.postgres.stop()

    def __enter__(self) -> LocalTopology:
        if threading.current_thread() is threading.main_thread():
            # its processes live in sessions of their own: a SIGTERM must unwind through __exit__ to stop them
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _logged(needle: str) -> Callable[[Process], bool]:
    """Ready once this run of the process has logged ``needle`` (a worker's "listening" line)."""
    def ready(process: Process) -> bool:
        try:
            with process.log.open("rb") as log:
                log.seek(process.log_offset)
                return needle.encode() in log.read()
        except OSError:
            return False
    return ready
