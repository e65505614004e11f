"""One embedded part of the appliance: a detached process with a pid file and a log, started until it is
ready and stopped with its whole process group; or, when its URL setting points elsewhere, an external
service that is only checked."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ctxpress.parts.process import group_alive, pid_alive
from ctxpress_core.errors import CtxpressError
from ctxpress_core.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class StartError(CtxpressError):
    pass


@dataclass
class PartStatus:
    name: str
    running: bool
    external: bool
    address: str
    pid: int | None = None
    detail: str = ""


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
        return pid if pid_alive(pid) else None

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
        while (pid_alive(pid) or group_alive(pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if group_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while group_alive(pid) and time.monotonic() < deadline + 5:
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
