"""The supervisor: its backoff and hang rules on a fake clock, and a killed worker coming back on the appliance."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxpress.parts.base import Part, StartError
from ctxpress.parts.supervisor import Backoff, HangDetector, Watch, describe, exit_reason, read_state
from ctxpress_core.settings import Settings


def test_backoff_doubles_up_to_the_cap() -> None:
    backoff = Backoff(initial_s=1.0, max_s=30.0, reset_after_s=60.0)
    assert [backoff.gone() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_backoff_starts_over_only_after_the_part_stayed_up_long_enough() -> None:
    backoff = Backoff(initial_s=1.0, max_s=30.0, reset_after_s=60.0)
    for _ in range(3):
        backoff.gone()
    assert not backoff.up(100.0)
    assert not backoff.up(159.0)
    assert backoff.gone() == 8.0  # up 59 s: still doubling
    assert not backoff.up(200.0)
    assert backoff.up(260.0)
    assert not backoff.up(261.0)  # reported once
    assert backoff.gone() == 1.0


def test_a_hang_needs_both_the_failed_checks_and_the_time() -> None:
    hang = HangDetector(hang_s=20.0, min_failures=5)
    assert [hang.observe(False, t) for t in (0.0, 1.0, 2.0, 3.0, 19.0)] == [None] * 5  # 5 checks, 19 s
    assert hang.observe(False, 20.0) == 20.0

    slow = HangDetector(hang_s=20.0, min_failures=5)
    assert [slow.observe(False, t) for t in (0.0, 25.0, 50.0, 75.0)] == [None] * 4  # 75 s, 4 checks
    assert slow.observe(False, 100.0) == 100.0


def test_one_answer_starts_the_count_over() -> None:
    hang = HangDetector(hang_s=20.0, min_failures=5)
    for t in range(19):
        assert hang.observe(False, float(t)) is None
    assert hang.observe(True, 19.0) is None
    # 5 failed checks again, but the time counts from the first of them: 20 s, not 0 s
    assert [hang.observe(False, t) for t in (20.0, 21.0, 22.0, 23.0, 24.0, 39.0)] == [None] * 6
    assert hang.observe(False, 40.0) == 20.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return False


class FakePart(Part):
    """A part without a process: alive or not, answering or not, as the test says."""

    def __init__(self, settings: Settings, name: str, hang_checked: bool) -> None:
        super().__init__(settings)
        self.name = name
        self.hang_checked = hang_checked
        self.alive = True
        self.answering = True
        self.probes = 0
        self.starts = 0
        self.start_error: str | None = None

    def pid(self) -> int | None:
        return 4242 if self.alive else None

    def ready(self) -> bool:
        self.probes += 1
        return self.answering

    def start(self, timeout_s: float) -> float:
        self.starts += 1
        if self.start_error:
            raise StartError(self.start_error)
        self.alive = self.answering = True
        return 0.0


class Harness:
    def __init__(self, tmp_path: Path, name: str = "completion-worker", hang_checked: bool = True) -> None:
        settings = Settings(home=tmp_path)
        self.clock = FakeClock()
        self.part = FakePart(settings, name, hang_checked)
        self.nats_up = True
        self.kills: list[int] = []
        self.records: list[dict[str, Any]] = []
        self.watch = Watch(self.part, settings, lambda _name, changes: self.records.append(changes),
                           threading.Event(), lambda: self.nats_up, clock=self.clock, wall=self.clock,
                           wait=self.clock.wait, kill=self.kills.append)

    def checks(self, n: int, every_s: float = 2.0) -> None:
        for _ in range(n):
            self.clock.now += every_s
            self.watch.check()

    def last(self, key: str) -> Any:
        return next(r[key] for r in reversed(self.records) if key in r)


def test_a_part_that_is_gone_is_restarted_after_a_growing_backoff(tmp_path: Path) -> None:
    h = Harness(tmp_path, "nats", hang_checked=False)
    h.checks(1)
    h.part.alive = False
    h.checks(1)
    assert h.part.starts == 1 and h.clock.waits == [1.0]
    assert h.kills == [4242]  # whatever the dead leader left in its group goes too
    assert h.last("restarts") == 1 and h.last("last_reason") == "exited (status unknown)"
    assert h.last("backoff_s") == 2.0 and h.last("last_start_error") is None
    h.part.alive = False
    h.checks(1)
    assert h.part.starts == 2 and h.clock.waits == [1.0, 2.0] and h.last("restarts") == 2


def test_a_failed_restart_is_the_reason_for_the_next_one(tmp_path: Path) -> None:
    h = Harness(tmp_path, "triton", hang_checked=False)
    h.part.alive = False
    h.part.start_error = "triton exited during start-up; see triton.log:\nAddress already in use"
    h.checks(1)
    assert h.last("last_start_error") == "triton exited during start-up; see triton.log:"
    h.part.start_error = None
    h.checks(1)
    assert h.part.starts == 2 and h.clock.waits == [1.0, 2.0]
    assert h.last("last_reason") == "start failed: triton exited during start-up; see triton.log:"
    assert h.last("last_start_error") is None


def test_a_worker_that_stops_answering_is_killed_and_restarted(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.checks(3)
    h.part.answering = False
    h.checks(10)  # every 2 s: the first failure at +2 s, the tenth at +20 s
    assert h.kills == [] and h.part.starts == 0
    h.checks(1)
    assert h.kills == [4242] and h.part.starts == 1
    assert h.last("last_reason") == "hung: no answer for 20 s" and h.last("restarts") == 1
    h.checks(20)
    assert h.part.starts == 1  # answering again


def test_no_answer_while_nats_is_down_is_not_a_hang(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.part.answering = False
    h.nats_up = False
    h.checks(50)
    assert h.kills == [] and h.part.starts == 0
    h.nats_up = True  # the count starts when NATS is back, giving the worker time to reconnect
    h.checks(10)
    assert h.part.starts == 0
    h.checks(1)
    assert h.part.starts == 1


def test_triton_and_postgres_are_never_probed_for_a_hang(tmp_path: Path) -> None:
    for name in ("triton", "postgres"):
        h = Harness(tmp_path, name, hang_checked=False)
        h.part.answering = False
        h.checks(100)
        assert h.part.probes == 0 and h.part.starts == 0 and h.kills == []


@pytest.mark.parametrize(("code", "reason"), [
    ("raise SystemExit(3)", "exited rc=3"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "exited (killed by signal 9)"),
])
def test_the_exit_status_of_a_process_it_started(tmp_path: Path, code: str, reason: str) -> None:
    h = Harness(tmp_path, "index-worker")
    h.part.alive = False
    h.part.process = subprocess.Popen([sys.executable, "-c", code])
    h.part.pid_file.parent.mkdir(parents=True)
    h.part.pid_file.write_text(f"{h.part.process.pid}\n")
    h.part.process.wait()
    h.checks(1)
    assert h.last("last_reason") == reason


def test_describe_for_status() -> None:
    entry = {"restarts": 2, "last_restart_at": 1000.0, "last_reason": exit_reason(-9), "backoff_s": 4.0}
    assert describe(entry, 1014.2) == "restarts: 2, last: exited (killed by signal 9) 14 s ago"
    assert describe({"restarts": 0}, 1014.0) == ""
    assert describe({**entry, "last_start_error": "boom"}, 1014.0).endswith("; that restart failed: boom")


# Against the shared appliance: a worker killed with its process group comes back by itself.


def _pid(settings: Settings, name: str) -> int | None:
    try:
        return int((settings.run_dir / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return None


def _answers(settings: Settings, name: str) -> bool:
    """The completion worker answers `{}` with a structured error, the index worker its status."""
    import nats
    from nats.errors import NoRespondersError, TimeoutError

    subject, payload = ((settings.completion_subject, b"{}") if name == "completion-worker"
                        else (settings.index_status_subject, b""))

    async def ask() -> bool:
        nc = await nats.connect(settings.effective_nats_url(), connect_timeout=2, allow_reconnect=False)
        try:
            reply = json.loads((await nc.request(subject, payload, timeout=2)).data)
        except (NoRespondersError, TimeoutError):
            return False
        finally:
            await nc.close()
        if name == "completion-worker":
            return isinstance(reply.get("error"), dict) and bool(reply["error"].get("code"))
        return "worker" in reply

    return asyncio.run(ask())


@pytest.mark.services
@pytest.mark.parametrize("name", ["completion-worker", "index-worker"])
def test_a_killed_worker_is_restarted(appliance: Any, name: str) -> None:
    settings = appliance.settings
    assert appliance.ctxpress("status").returncode == 0
    before = read_state(settings)["parts"][name]["restarts"]
    pid = _pid(settings, name)
    assert pid is not None and _answers(settings, name)

    os.killpg(os.getpgid(pid), signal.SIGKILL)

    deadline = time.monotonic() + 180
    while _pid(settings, name) in (None, pid) or not _answers(settings, name):
        log = (settings.log_dir / "supervisor.log").read_text()[-3000:]
        assert time.monotonic() < deadline, f"{name} is not back; supervisor.log ends:\n{log}"
        time.sleep(1)
    entry = read_state(settings)["parts"][name]
    assert entry["restarts"] == before + 1
    assert entry["last_reason"].startswith("exited")
    assert f"{name} {entry['last_reason']}" in (settings.log_dir / "supervisor.log").read_text()
    status = appliance.ctxpress("status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {row["name"]: row for row in json.loads(status.stdout)["parts"]}
    assert rows["supervisor"]["running"] and rows[name]["supervision"]["restarts"] == before + 1
    text = appliance.ctxpress("status")
    assert text.returncode == 0 and f"restarts: {before + 1}, last: exited" in text.stdout, text.stdout
