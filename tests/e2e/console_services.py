"""What the console's browser test runs against: a team-mode NATS and PostgreSQL (tests/team_services.py), a
completion worker serving members' subjects with the scripted engine (the engine is not the point) and writing real
telemetry rows, and ``ctxpress console`` as its own process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ctxpress_core import identity, nats_connect
from ctxpress_core.settings import Settings
from serving.scripted_engine import ScriptedEngine
from workers.completion.service import CompletionService
from workers.completion.worker import _subscribe
from workers.grants import Grants
from workers.telemetry import TelemetryWriter

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    """A coroutine on a loop of its own in another thread (Playwright's sync API holds this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result(timeout=120)  # type: ignore[arg-type]


@contextmanager
def scripted_worker(settings: Settings, answer: str = "a + b\n") -> Iterator[None]:
    """The completion worker's own subscriptions and service, as the worker user, with the scripted engine."""
    ready, failed = threading.Event(), []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        url = settings.effective_database_url()
        telemetry = TelemetryWriter(url, flush_interval_s=0.1)
        telemetry.start()
        service = CompletionService(settings, ScriptedEngine(answer), lambda s: max(1, len(s) // 4), "scripted",
                                    telemetry, None, Grants(url))
        nc = await nats_connect.connect(settings.nats_servers(), plaintext_credentials=not settings.nats_tls,
                                        **identity.service_connect_options(settings))
        subscriptions = await _subscribe(nc, settings, service, team=True, tasks=set())
        ready.set()
        await stop.wait()
        for sub, _ in subscriptions:
            await sub.unsubscribe()
        await nc.close()
        await telemetry.close()

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except Exception as exc:
            failed.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(60)
    if failed:
        raise failed[0]
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


def console_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    env.update({"CTXPRESS_HOME": str(settings.home), "CTXPRESS_TEAM": "true",
                "CTXPRESS_DATABASE_URL": settings.effective_database_url(),
                "CTXPRESS_NATS_PORT": str(settings.nats_port),
                "CTXPRESS_NATS_MONITOR_PORT": str(settings.nats_monitor_port),
                "CTXPRESS_CONSOLE_PORT": str(settings.console_port), "CTXPRESS_WORKER_METRICS_PORT": "0",
                "PYTHONPATH": str(ROOT)})
    return env


def cli(settings: Settings, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxpress.cli", *args], env=console_env(settings), input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@contextmanager
def console_process(settings: Settings, log: Path) -> Iterator[str]:
    """``ctxpress console`` until it answers; yields its URL."""
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ctxpress.cli", "console"], env=console_env(settings),
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    url = settings.console_url().rstrip("/")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/login", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ctxpress console did not start:\n{log.read_text()}") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


async def nats_login(nats_url: str, options: dict[str, Any]) -> bool:
    """Whether NATS lets these credentials in."""
    try:
        nc = await nats_connect.connect(nats_url, connect_timeout=3, max_reconnect_attempts=0, allow_reconnect=False,
                                        **options)
    except Exception:
        return False
    await nc.close()
    return True
