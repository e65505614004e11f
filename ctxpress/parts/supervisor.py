"""The supervisor: restarts an embedded part that dies, and a worker that stops answering. Its own part
(``SupervisorPart``) and the process it runs live here together.

``ctxpress up`` starts it last, as one more detached part (``python -m ctxpress.parts.supervisor``, log in
``<home>/logs/supervisor.log``); ``ctxpress down`` stops it first, so it never restarts what ``down`` stops.
Every embedded part has a thread of its own: Triton loading its model for a minute must not delay noticing
that a worker died.

Per part, every ``supervisor_interval_s``:

- its process is gone: it is restarted with ``Part.start`` after a backoff of 1 s, 2 s, 4 s, … up to
  ``supervisor_backoff_max_s``; the backoff starts over once the part has stayed up ``supervisor_backoff_reset_s``.
- the workers only (``Part.hang_checked``): the process lives but its ``answers()`` round trip through NATS fails
  ``supervisor_hang_checks`` times in a row over at least ``supervisor_hang_s``: a frozen event loop. Its process
  group gets SIGKILL and the part is restarted. Failures while NATS itself does not answer do not count: the
  workers reconnect by themselves once it is back. Triton and PostgreSQL are never probed for a hang: a model
  load or a long query is slow, not stuck.

``<run_dir>/supervisor.json``, rewritten after every change, is what ``ctxpress status`` shows:
``{"pid", "started_at", "parts": {name: {"restarts", "last_restart_at", "last_reason", "backoff_s",
"last_start_error"}}}``; ``backoff_s`` is the wait before the next restart should the part go now. Only a
process's parent learns its exit status: for a process the supervisor started the reason is ``exited rc=N`` or
``exited (killed by signal N)``, for one ``ctxpress up`` started (and PostgreSQL, which pg_ctl daemonizes)
``exited (status unknown)``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from ctxpress.parts import START_TIMEOUTS, parts
from ctxpress.parts.base import Part
from ctxpress.parts.nats_server import NatsPart
from ctxpress.parts.process import group_alive
from ctxpress_core.settings import Settings, get_settings

log = logging.getLogger("ctxpress.supervisor")


class SupervisorPart(Part):
    """The supervisor as a part: ready once this very process has written its state file."""

    name = "supervisor"

    @property
    def state_file(self) -> Path:
        return self.settings.run_dir / "supervisor.json"

    def address(self) -> str:
        return str(self.state_file)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "ctxpress.parts.supervisor"]

    def ready(self) -> bool:
        # Ready once this very process has written its state (a file left by an earlier one does not count).
        pid = self.pid()
        try:
            return pid is not None and json.loads(self.state_file.read_text()).get("pid") == pid
        except (OSError, ValueError, AttributeError):
            return False


# On SIGTERM, how long a restart in progress may go on before the supervisor leaves anyway: below the
# 30 s `ctxpress down` waits for it. The part's pid file is written as soon as it is spawned, so `down`
# still stops a part whose start the supervisor did not see through.
STOP_GRACE_S = 20.0
KILL_WAIT_S = 10.0


@dataclass
class Backoff:
    """When to restart one part: exponential, reset by a long enough stretch of being up."""

    initial_s: float
    max_s: float
    reset_after_s: float
    next_s: float = field(init=False)
    up_since: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.next_s = self.initial_s

    def up(self, now: float) -> bool:
        """The part is up at ``now``; True when that resets the backoff."""
        if self.up_since is None:
            self.up_since = now
        if now - self.up_since >= self.reset_after_s and self.next_s != self.initial_s:
            self.next_s = self.initial_s
            return True
        return False

    def gone(self) -> float:
        """The part is gone: the wait before restarting it. The wait after that is twice as long."""
        self.up_since = None
        delay = self.next_s
        self.next_s = min(self.next_s * 2, self.max_s)
        return delay


@dataclass
class HangDetector:
    """A live process is hung once its probe has failed ``min_failures`` times in a row over ``hang_s``."""

    hang_s: float
    min_failures: int
    failures: int = field(default=0, init=False)
    first_failure_at: float | None = field(default=None, init=False)

    def observe(self, answered: bool, now: float) -> float | None:
        """One probe at ``now``: the seconds without an answer once that makes a hang, else None."""
        if answered:
            self.reset()
            return None
        if self.first_failure_at is None:
            self.first_failure_at = now
        self.failures += 1
        silent = now - self.first_failure_at
        return silent if self.failures >= self.min_failures and silent >= self.hang_s else None

    def reset(self) -> None:
        self.failures = 0
        self.first_failure_at = None


def exit_reason(returncode: int) -> str:
    return f"exited (killed by signal {-returncode})" if returncode < 0 else f"exited rc={returncode}"


def kill_group(pgid: int) -> None:
    """SIGKILL what is left of a process group (a hung worker; Triton's server after its leader died, which
    would hold the ports its successor needs) and wait until it is gone."""
    if not group_alive(pgid):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + KILL_WAIT_S
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


Record = Callable[[str, dict[str, Any]], None]


class Watch:
    """Supervision of one part (the clock, the wait and the kill are parameters for the tests)."""

    def __init__(self, part: Part, settings: Settings, record: Record, stop: threading.Event,
                 nats_ready: Callable[[], bool], clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, wait: Callable[[float], bool] | None = None,
                 kill: Callable[[int], None] = kill_group, restarts: int = 0) -> None:
        self.part = part
        self.record = record
        self.stop = stop
        self.nats_ready = nats_ready
        self.clock = clock
        self.wall = wall
        self.wait = wait or stop.wait
        self.kill = kill
        self.interval_s = max(settings.supervisor_interval_s, 0.1)
        self.backoff = Backoff(settings.supervisor_backoff_initial_s, settings.supervisor_backoff_max_s,
                               settings.supervisor_backoff_reset_s)
        self.hang = HangDetector(settings.supervisor_hang_s, settings.supervisor_hang_checks)
        self.restarts = restarts
        self.last_pid: int | None = None  # the part's process when last seen alive: its group is cleaned up
        self.start_failure: str | None = None  # why the last restart failed, the reason for the next one

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.check()
            except Exception:  # a bug or an odd state must not end this part's supervision
                log.exception("%s: check failed", self.part.name)
            self.stop.wait(self.interval_s)

    def check(self) -> None:
        pid, reason = self._process()
        if pid is None:
            self._restart(self.start_failure or reason)
            return
        self.last_pid = pid
        self.start_failure = None
        if not self.part.hang_checked:
            self._up()
            return
        probed_at = self.clock()
        if self.part.answers():
            self.hang.reset()
            self._up()
        elif not self.nats_ready():
            self.hang.reset()  # not the worker's fault; it reconnects by itself once NATS is back
        elif (silent := self.hang.observe(False, probed_at)) is not None:
            log.warning("%s (pid %d): no answer for %.0f s over %d checks; killing its process group",
                        self.part.name, pid, silent, self.hang.failures)
            self._restart(f"hung: no answer for {silent:.0f} s")  # the restart kills the group first

    def _up(self) -> None:
        if self.backoff.up(self.clock()):
            log.info("%s: up for %.0f s, backoff back to %.0f s", self.part.name, self.backoff.reset_after_s,
                     self.backoff.next_s)
            self.record(self.part.name, {"backoff_s": self.backoff.next_s})

    def _process(self) -> tuple[int | None, str]:
        """The live process of the part, or None and why it is gone."""
        process = self.part.process
        if process is not None and _recorded_pid(self.part) == process.pid:
            # Our own child: poll it rather than look at its pid, which would reap it without its status.
            returncode = process.poll()
            return (process.pid, "") if returncode is None else (None, exit_reason(returncode))
        pid = self.part.pid()
        return (pid, "") if pid is not None else (None, "exited (status unknown)")

    def _restart(self, reason: str) -> None:
        # The whole group goes: a hung worker, or what a dead leader left behind.
        if self.last_pid is not None:
            self.kill(self.last_pid)
            if self.part.process is not None:
                self.part.process.poll()  # reap it
        self.last_pid = None
        self.start_failure = None
        self.hang.reset()
        delay = self.backoff.gone()
        log.warning("%s %s (log: %s); restarting in %.0f s", self.part.name, reason, self.part.log_file, delay)
        if self.wait(delay):
            return  # stopping: `ctxpress down` stops the rest
        self.restarts += 1
        self.record(self.part.name, {"restarts": self.restarts, "last_restart_at": round(self.wall(), 1),
                                     "last_reason": reason, "backoff_s": self.backoff.next_s})
        started = self.clock()
        try:
            self.part.start(START_TIMEOUTS[self.part.name])
        except Exception as exc:
            message = (str(exc).splitlines() or [type(exc).__name__])[0]
            self.start_failure = f"start failed: {message}"
            log.error("%s: restart %d failed: %s", self.part.name, self.restarts, exc)
            self.last_pid = _recorded_pid(self.part)  # what the failed start left is cleaned up before the next
            self.record(self.part.name, {"last_start_error": message})
            return
        log.info("%s: restart %d ready in %.1f s", self.part.name, self.restarts, self.clock() - started)
        self.record(self.part.name, {"last_start_error": None})


def _recorded_pid(part: Part) -> int | None:
    try:
        return int(part.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def read_state(settings: Settings) -> dict[str, Any]:
    try:
        state = json.loads(SupervisorPart(settings).state_file.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def describe(entry: dict[str, Any], now: float) -> str:
    """One line for ``ctxpress status``; empty for a part that was never restarted."""
    restarts = entry.get("restarts", 0)
    if not restarts:
        return ""
    text = f"restarts: {restarts}"
    if entry.get("last_reason"):
        at = entry.get("last_restart_at")
        text += f", last: {entry['last_reason']}" + (f" {max(now - at, 0):.0f} s ago" if at else "")
    if entry.get("last_start_error"):
        text += f"; that restart failed: {entry['last_start_error']}"
    return text


class Supervisor:
    def __init__(self, settings: Settings, stop: threading.Event) -> None:
        self.stop = stop
        self.path = SupervisorPart(settings).state_file
        self.lock = threading.Lock()
        self.started_at = round(time.time(), 1)
        # `ctxpress up` restarts the supervisor; the restart history of the running appliance carries over.
        earlier = read_state(settings).get("parts", {})
        nats_ready = NatsPart(settings).ready
        self.watches = [Watch(part, settings, self.record, stop, nats_ready,
                              restarts=int(earlier.get(part.name, {}).get("restarts", 0)))
                        for part in parts(settings) if not part.external]
        self.state: dict[str, dict[str, Any]] = {
            w.part.name: {"restarts": w.restarts, "last_restart_at": None, "last_reason": None,
                          "backoff_s": w.backoff.next_s, "last_start_error": None,
                          **{k: v for k, v in earlier.get(w.part.name, {}).items()
                             if k in ("last_restart_at", "last_reason", "last_start_error")}}
            for w in self.watches}

    def record(self, name: str, changes: dict[str, Any]) -> None:
        with self.lock:
            self.state[name].update(changes)
            self._write()

    def _write(self) -> None:
        body = {"pid": os.getpid(), "started_at": self.started_at, "updated_at": round(time.time(), 1),
                "parts": self.state}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n")
        tmp.replace(self.path)  # a reader never sees half a file

    def run(self) -> None:
        with self.lock:
            self._write()
        threads = [threading.Thread(target=w.run, name=w.part.name, daemon=True) for w in self.watches]
        for thread in threads:
            thread.start()
        log.info("supervising %s (pid %d)", ", ".join(w.part.name for w in self.watches), os.getpid())
        # Not stop.wait(): the signal handler sets the event, and it would deadlock on the event's lock if
        # the signal arrived while this thread held it.
        while not self.stop.is_set():
            time.sleep(0.5)
        log.info("stopping")
        deadline = time.monotonic() + STOP_GRACE_S
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        if busy := [t.name for t in threads if t.is_alive()]:
            log.warning("leaving while %s is still starting (its pid file is written)", ", ".join(busy))
        with self.lock:
            self._write()
        log.info("stopped")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # The probes' failed connections while a part restarts are expected; nats-py would log each with a traceback.
    logging.getLogger("nats").setLevel(logging.CRITICAL)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    Supervisor(get_settings(), stop).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
