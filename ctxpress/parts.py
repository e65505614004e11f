"""Start, stop and inspect the embedded parts of the appliance.

Each part runs as its own detached process (own session, so one signal reaches its
children too) with a pid file and a log under ``<home>/run`` and ``<home>/logs``.
``ctxpress up`` can therefore return while the parts keep running, and ``ctxpress
down`` finds them again from any shell. A part whose URL setting points elsewhere is
external: we only check that it answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxpress import team
from ctxpress.core import identity, inference
from ctxpress.core.errors import CtxpressError
from ctxpress.core.settings import Settings
from db.embedded import EmbeddedPostgres

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class StartError(CtxpressError):
    pass


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _http_ok(url: str, timeout_s: float = 5.0) -> bool:
    # Generous timeout: on a 2-core machine a model loading next door can delay a health answer
    # by more than a second, and a refused connection still returns at once.
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own finished child
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # a zombie has exited already
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg also succeeds on zombies; look at each member
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().split(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@dataclass
class PartStatus:
    name: str
    running: bool
    external: bool
    address: str
    pid: int | None = None
    detail: str = ""


def engine_summary(path: Path) -> str:
    """One line on the CPU engine from the status file it writes after each request."""
    try:
        s = json.loads(path.read_text())
    except (OSError, ValueError):
        return "engine: no request served yet"
    pool = s.get("pool", {})
    hit = pool.get("reused_tokens", 0) / pool["prompt_tokens"] if pool.get("prompt_tokens") else 0.0
    draft = s.get("draft_model") or f"off ({s.get('draft_disabled_reason') or 'not configured'})"
    spec = ", ".join(f"{k} {v}" for k, v in sorted(s.get("speculation", {}).items())) or "none yet"
    admission = s.get("admission", {})
    order = "latency-first" if admission.get("latency_first") else "arrival order"
    disk = s.get("disk")
    on_disk = (f"on disk {disk.get('files', 0)} files ({disk.get('bytes', 0) / 2**20:,.0f} of "
               f"{disk.get('budget_bytes', 0) / 2**20:,.0f} MiB), {disk.get('restored', 0)} restored "
               f"({disk.get('restored_tokens', 0):,} tokens), {disk.get('dropped', 0)} dropped; "
               if disk else "no disk tier; ")
    return (f"engine: KV {s.get('kv_type')}, pool {len(s.get('kv_slots', []))} files, "
            f"{hit:.0%} of prompt tokens reused, {pool.get('evictions', 0)} evictions; {on_disk}"
            f"speculation: {spec}; draft model: {draft}; admission: {order}, "
            f"{s.get('gave_way', 0)} prompts gave way to requests due earlier")


class Part:
    """One service of the appliance."""

    name: str = ""
    # Whether the supervisor also restarts it when it stops answering its ``ready()`` probe while its
    # process lives (a frozen event loop). Only for parts whose probe is a cheap round trip that a busy
    # but healthy process still answers: a model load or a long query is not a hang.
    hang_checked: bool = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # The process this object started, kept so that its parent (the supervisor) can read its exit
        # status: once garbage-collected, subprocess would reap it and the status would be lost.
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid_file(self) -> Path:
        return self.settings.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.settings.log_dir / f"{self.name}.log"

    @property
    def external(self) -> bool:
        return False

    def address(self) -> str:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def answers(self) -> bool:
        """The supervisor's hang probe of a live ``hang_checked`` part, asked about once a second."""
        return self.ready()

    def argv(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1"}

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    def running(self) -> bool:
        return self.pid() is not None

    def status(self) -> PartStatus:
        if self.external:
            return PartStatus(self.name, self.ready(), True, self.address())
        return PartStatus(self.name, self.running() and self._ready_soon(), False, self.address(), self.pid())

    def _ready_soon(self, attempts: int = 3) -> bool:
        """A live process that misses one probe under load is asked again before it is reported down."""
        for attempt in range(attempts):
            if self.ready():
                return True
            if attempt + 1 < attempts:
                time.sleep(0.5)
        return False

    def start(self, timeout_s: float) -> float:
        """Start (if needed) and wait until ready; returns seconds taken."""
        started = time.perf_counter()
        if self.external:
            if not self.ready():
                raise StartError(f"{self.name}: external service at {self.address()} does not answer")
            return 0.0
        if not self.running():
            self.settings.run_dir.mkdir(parents=True, exist_ok=True)
            self.settings.log_dir.mkdir(parents=True, exist_ok=True)
            with self.log_file.open("ab") as log:
                proc = subprocess.Popen(
                    self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, env=self.env(), cwd=PROJECT_ROOT,
                )
            self.pid_file.write_text(f"{proc.pid}\n")
            self.process = proc
        deadline = started + timeout_s
        while not self.ready():
            if not self.running():
                raise StartError(f"{self.name} exited during start-up; see {self.log_file}:\n{self._log_tail()}")
            if time.perf_counter() > deadline:
                raise StartError(f"{self.name} not ready after {timeout_s:.0f}s; see {self.log_file}")
            time.sleep(0.1)
        return time.perf_counter() - started

    def stop(self, timeout_s: float = 30.0) -> None:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout_s
        # The leader stops its children itself (Triton, the workers); wait for the whole group.
        while (_pid_alive(pid) or _group_alive(pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while _group_alive(pid) and time.monotonic() < deadline + 5:
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


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
        # A config file because max_payload has no command-line flag; well above the worker's own
        # request limit so an oversized request (an editor's huge file) reaches the worker and gets a
        # structured error rather than a refusal from NATS.
        # Team mode: the users and their permissions, a file of its own that `ctxpress users` rewrites
        # (nats-server resolves the include next to this file).
        users = f'include "{team.ensure_authorization_file(s).name}"\n' if identity.team_mode(s) else ""
        tls = ""
        if identity.tls_on(s):  # every client, the workers on loopback too: one listener, one rule
            from ctxpress.core.tls import ensure_tls_files

            files = ensure_tls_files(s)
            tls = (f'tls {{ cert_file: {json.dumps(str(files.cert))}, key_file: {json.dumps(str(files.key))}, '
                   "timeout: 2 }\n")
        config.write_text(
            f'server_name: "ctxpress"\n'
            f'listen: "{s.nats_bind_host or s.bind_host}:{s.nats_port}"\n'
            f'http: "{identity.monitor_host(s)}:{s.nats_monitor_port}"\n'
            f"max_payload: {max(2 * s.max_request_bytes, 8 << 20)}\n"
            f'jetstream {{ store_dir: "{s.state_dir / "nats"}" }}\n'
            f"{users}{tls}"
        )
        binary = Path(sys.executable).parent / "nats-server"
        return [str(binary), "-c", str(config)]

    def ready(self) -> bool:
        if self.external:  # a cluster answers while any of its nodes does
            return any(_port_open(host, int(port)) for host, _, port in
                       (url.split("://")[-1].rpartition(":") for url in self.settings.nats_servers()))
        return _http_ok(f"http://{identity.monitor_host(self.settings)}:{self.settings.nats_monitor_port}"
                        "/healthz?js-enabled-only=true")


class PostgresPart(Part):
    name = "postgres"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.server = EmbeddedPostgres(settings.state_dir / "postgres", settings.bind_host, settings.postgres_port)

    @property
    def external(self) -> bool:
        return self.settings.database_url is not None

    def address(self) -> str:
        from sqlalchemy import make_url

        return make_url(self.settings.effective_database_url()).render_as_string(hide_password=True)

    def pid(self) -> int | None:
        return self.server.pid()

    def ready(self) -> bool:
        if self.external:
            from db.session import can_connect

            return can_connect(self.settings.effective_database_url())
        return _port_open(self.settings.bind_host, self.settings.postgres_port)

    def start(self, timeout_s: float) -> float:
        started = time.perf_counter()
        if not self.external and not self.running():
            self.server.start(timeout_s=timeout_s)
        elif self.external and not self.ready():
            raise StartError(f"postgres: external database at {self.address()} does not answer")
        from db.migrations import migrate

        migrate(self.settings.effective_database_url())
        return time.perf_counter() - started

    def stop(self, timeout_s: float = 30.0) -> None:
        if not self.external:
            self.server.stop(timeout_s=timeout_s)


class TritonPart(Part):
    name = "triton"

    @property
    def external(self) -> bool:
        return self.settings.triton_url is not None

    def address(self) -> str:
        return self.settings.effective_triton_url()

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "serving.triton_server"]

    def status(self) -> PartStatus:
        status = super().status()
        if status.running and not self.external:
            status.detail = engine_summary(self.settings.run_dir / "engine-status.json")
        return status

    def ready(self) -> bool:
        if self.external:
            host, _, port = self.address().rpartition(":")
            return _port_open(host, int(port))
        base = f"http://{self.settings.triton_bind_host}:{self.settings.triton_http_port}"
        # Every served model must be ready: a model's stub can fail after the server says ready.
        models = (inference.COMPLETION_MODEL, inference.EMBEDDING_MODEL)
        return _http_ok(f"{base}/v2/health/ready") and all(
            _http_ok(f"{base}/v2/models/{model}/ready") for model in models)


class CompletionWorkerPart(Part):
    name = "completion-worker"
    hang_checked = True

    def address(self) -> str:
        return f"{self.settings.completion_subject} (queue {self.settings.completion_queue})"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "workers.completion"]

    def ready(self) -> bool:
        # Ready means it answers: an empty object must come back as a structured error.
        return _nats_answers(self.settings, self.settings.completion_subject, b"{}", "error")

    def answers(self) -> bool:
        # The same round trip through the worker's event loop, on the feedback subject: a `{}` completion
        # request costs an error metric, a log line and a telemetry row, once a second from the supervisor;
        # invalid feedback is answered without any of them.
        return _nats_answers(self.settings, self.settings.feedback_subject, b"{}", "error")


def _nats_answers(settings: Settings, subject: str, payload: bytes, expected_key: str) -> bool:
    """One request-reply round trip: does a JSON reply with ``expected_key`` come back? (In team mode the probe
    connects as the worker user, which may publish on the single-user subjects.)"""
    url = settings.nats_servers()
    try:
        options: dict[str, Any] = identity.service_connect_options(settings)
    except identity.TeamConfigError:
        return False  # `ctxpress up` said why before starting anything

    async def probe() -> bool:
        import nats
        from nats.errors import NoRespondersError, TimeoutError

        try:
            nc = await nats.connect(url, connect_timeout=1, max_reconnect_attempts=0, allow_reconnect=False,
                                    **options)
        except Exception:
            return False
        try:
            reply = await nc.request(subject, payload, timeout=1.0)
            return expected_key in json.loads(reply.data)
        except (NoRespondersError, TimeoutError, ValueError):
            return False
        finally:
            await nc.close()

    return asyncio.run(probe())


class IndexWorkerPart(Part):
    name = "index-worker"
    hang_checked = True

    def address(self) -> str:
        return f"stream {self.settings.index_stream} (consumer {self.settings.index_consumer})"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "workers.index_worker"]

    def ready(self) -> bool:
        # Ready once it has bound the durable consumer and answers its status subject (one round trip).
        return _nats_answers(self.settings, self.settings.index_status_subject, b"", "worker")


class SupervisorPart(Part):
    """Restarts the embedded parts that die, and the workers when they stop answering (ctxpress/supervisor.py)."""

    name = "supervisor"

    @property
    def state_file(self) -> Path:
        return self.settings.run_dir / "supervisor.json"

    def address(self) -> str:
        return str(self.state_file)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "ctxpress.supervisor"]

    def ready(self) -> bool:
        # Ready once this very process has written its state (a file left by an earlier one does not count).
        pid = self.pid()
        try:
            return pid is not None and json.loads(self.state_file.read_text()).get("pid") == pid
        except (OSError, ValueError, AttributeError):
            return False


def parts(settings: Settings) -> list[Part]:
    """In start order."""
    return [NatsPart(settings), PostgresPart(settings), TritonPart(settings), CompletionWorkerPart(settings),
            IndexWorkerPart(settings)]


START_TIMEOUTS = {"nats": 30.0, "postgres": 120.0, "triton": 300.0, "completion-worker": 120.0, "index-worker": 60.0,
                  "supervisor": 30.0}


def check_ports(settings: Settings) -> None:
    """Refuse two embedded parts on one port up front (tritonserver would only print its usage)."""
    ports = {
        "nats_port": settings.nats_port, "nats_monitor_port": settings.nats_monitor_port,
        "postgres_port": settings.postgres_port, "triton_http_port": settings.triton_http_port,
        "triton_grpc_port": settings.triton_grpc_port, "triton_metrics_port": settings.triton_metrics_port,
        "worker_metrics_port": settings.worker_metrics_port,
    }
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port and port in seen:
            raise StartError(f"CTXPRESS_{name.upper()} and CTXPRESS_{seen[port].upper()} are both {port}")
        seen[port] = name


def up(settings: Settings, report: Callable[[str], None] = print) -> dict[str, float]:
    from serving.weights import DRAFT, TARGET, ensure_model

    timings: dict[str, float] = {}
    check_ports(settings)
    team_mode = identity.team_mode(settings)
    if team_mode:  # refuse before anything starts unless the parts can authenticate
        report(f"  team mode: NATS users from PostgreSQL, credentials in {identity.team_dir(settings)}")
        _team_step(team.prepare_up, settings)
    if settings.triton_url is None and settings.model_path is None:
        started = time.perf_counter()
        for model in (TARGET, DRAFT):
            ensure_model(model, settings.models_dir, progress=_bytes_progress(model.name, report))
        timings["models"] = time.perf_counter() - started
    # A running supervisor is stopped while the parts are checked, or it and `up` could both start a part
    # that is down (two processes, one pid file); it comes back last, once every part is ready, and
    # carries the restart history over from its state file.
    supervisor = SupervisorPart(settings)
    if supervisor.running():
        supervisor.stop()
    for part in [*parts(settings), supervisor]:
        was_running = part.running()
        report(f"  {part.name:<18} starting…" if not (was_running or part.external) else
               f"  {part.name:<18} {'external' if part.external else 'already running'}, checking…")
        seconds = part.start(START_TIMEOUTS[part.name])
        timings[part.name] = seconds
        report(f"  {part.name:<18} ready in {seconds:5.1f}s  {part.address()}")
        if team_mode:  # NATS must demand authentication; the developers come from PostgreSQL
            _team_step(team.after_part_started, settings, part.name, report)
    return timings


def _team_step(step: Callable[..., None], *args: Any) -> None:
    try:
        step(*args)
    except identity.TeamConfigError as exc:
        raise StartError(str(exc)) from None


def down(settings: Settings, report: Callable[[str], None] = print) -> list[str]:
    """Stop every part; returns the parts that could not be stopped (each reported, the others
    stopped all the same: one part's failure must not leave the rest running)."""
    failed: list[str] = []
    # The supervisor goes first, or it would restart what is stopped next.
    for part in [SupervisorPart(settings), *reversed(parts(settings))]:
        if part.external:
            continue
        try:
            if part.running():
                part.stop()
                report(f"  {part.name:<18} stopped")
        except Exception as exc:
            failed.append(part.name)
            report(f"  {part.name:<18} NOT stopped: {exc}")
    SupervisorPart(settings).state_file.unlink(missing_ok=True)  # restart history of an appliance that is gone
    return failed


def _bytes_progress(name: str, report: Callable[[str], None]) -> Callable[[int, int], None]:
    last = [-1]

    def progress(done: int, total: int) -> None:
        pct = done * 100 // max(total, 1)
        if pct // 25 != last[0]:
            last[0] = pct // 25
            report(f"  model {name}: joining parts {pct:3d}%")

    return progress
