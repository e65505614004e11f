"""The overview's snapshot: what ``ctxpress status`` computes (each part up or down, its restarts), the engine's
state file, the Triton metrics that matter, and the alerts. Probing the parts takes seconds when one is down, so a
background task refreshes the snapshot and a page shows the latest one with its age."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from ctxpress_core.settings import Settings

log = logging.getLogger("ctxpress.console")

# Triton's Prometheus counters (cumulative), per model: what a lead reads as load and where time goes.
_TRITON_METRICS = {
    "nv_inference_request_success": "requests",
    "nv_inference_request_failure": "failures",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_infer_duration_us": "compute_us",
    "nv_inference_pending_request_count": "pending",
}


@dataclass
class PartRow:
    name: str
    running: bool
    external: bool
    address: str
    pid: int | None
    detail: str
    supervision: str


@dataclass
class Snapshot:
    taken_at: float
    parts: list[PartRow]
    model: str
    engine: dict[str, Any]
    triton: dict[str, dict[str, float]]
    metrics_urls: list[str]
    alerts: list[str] = field(default_factory=list)


def take(settings: Settings) -> Snapshot:
    """One look at the appliance (blocking: run it off the event loop)."""
    from ctxpress.parts import parts
    from ctxpress.parts.supervisor import SupervisorPart, describe, read_state

    now = time.time()
    rows = [part.status() for part in [*parts(settings), SupervisorPart(settings)]]
    restarts = read_state(settings).get("parts", {}) if rows[-1].running else {}
    part_rows = [PartRow(r.name, r.running, r.external, r.address, r.pid, r.detail,
                         describe(restarts.get(r.name) or {}, now)) for r in rows]
    model = settings.model_path.name if settings.model_path else f"{settings.model_name} (packaged GGUF)"
    engine = _engine_state(settings)
    triton = triton_metrics(settings.metrics_url())
    urls = [settings.metrics_url()]
    if settings.worker_metrics_port:
        urls.append(f"http://{settings.metrics_bind_host}:{settings.worker_metrics_port}/metrics")
    alerts = [f"{r.name} is down" for r in part_rows if not r.running]
    alerts += [r.detail for r in part_rows if r.detail.startswith("ALERT")]
    return Snapshot(now, part_rows, model, engine, triton, urls, alerts)


def _engine_state(settings: Settings) -> dict[str, Any]:
    try:
        raw = json.loads((settings.run_dir / "engine-status.json").read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def triton_metrics(url: str, timeout_s: float = 2.0) -> dict[str, dict[str, float]]:
    """Per model, the counters of ``_TRITON_METRICS`` from Triton's Prometheus endpoint; empty when it is down."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return {}
    found: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                key = _TRITON_METRICS.get(sample.name)
                if key is not None:
                    model = sample.labels.get("model", "?")
                    found.setdefault(model, {})[key] = found.get(model, {}).get(key, 0.0) + sample.value
    except ValueError:  # not Prometheus text
        return {}
    return found


class StatusCache:
    """The latest snapshot, refreshed every ``interval_s`` while the console runs."""

    def __init__(self, settings: Settings, interval_s: float = 5.0) -> None:
        self.settings = settings
        self.interval_s = interval_s
        self.latest: Snapshot | None = None
        self._first = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def get(self, wait_s: float = 15.0) -> Snapshot | None:
        if self.latest is None:
            try:
                await asyncio.wait_for(self._first.wait(), wait_s)
            except TimeoutError:
                return None
        return self.latest

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                self.latest = await loop.run_in_executor(None, take, self.settings)
            except Exception:  # a probe's failure must not end the refreshes
                log.exception("status snapshot failed")
            self._first.set()
            await asyncio.sleep(self.interval_s)
