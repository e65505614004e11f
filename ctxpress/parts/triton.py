"""The Triton part (``python -m serving.engine.triton_server``, the CPU engine behind it) and the line on the
engine that ``ctxpress status`` shows from the status file the engine writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ctxpress.parts.base import Part, PartStatus
from ctxpress.parts.probes import http_ok, port_open
from ctxpress_core import inference


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
    threads = (f"threads: {s.get('threads')} generating ({s.get('threads_mode')}"
               + (f", other processes {s['host_other_cores']:.1f} cores, {s.get('fewer_threads', 0)} requests on "
                  "fewer threads)" if s.get("host_other_cores") is not None else ")"))
    return (f"engine: KV {s.get('kv_type')}, pool {len(s.get('kv_slots', []))} files, "
            f"{hit:.0%} of prompt tokens reused, {pool.get('evictions', 0)} evictions; {on_disk}"
            f"speculation: {spec}; draft model: {draft}; admission: {order}, "
            f"{s.get('gave_way', 0)} prompts gave way to requests due earlier; {threads}")


class TritonPart(Part):
    name = "triton"

    @property
    def external(self) -> bool:
        return self.settings.triton_url is not None

    def address(self) -> str:
        return self.settings.effective_triton_url()

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "serving.engine.triton_server"]

    def status(self) -> PartStatus:
        status = super().status()
        if status.running and not self.external:
            status.detail = engine_summary(self.settings.run_dir / "engine-status.json")
        return status

    def ready(self) -> bool:
        if self.external:
            host, _, port = self.address().rpartition(":")
            return port_open(host, int(port))
        return engine_ready(f"http://{self.settings.triton_bind_host}:{self.settings.triton_http_port}")


def engine_ready(base: str) -> bool:
    """The Triton server at ``base`` (``http://host:port``) and every model it serves are ready: a model's stub can
    fail after the server says ready."""
    models = (inference.COMPLETION_MODEL, inference.EMBEDDING_MODEL)
    return http_ok(f"{base}/v2/health/ready") and all(http_ok(f"{base}/v2/models/{model}/ready") for model in models)
