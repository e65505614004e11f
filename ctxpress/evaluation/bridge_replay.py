"""The typing replay sent through ``ctxpress serve-http`` as llama.vscode sends it.

At each pause of the replay (the same pauses as the NATS replay), one ``POST /infill`` with the
body llama.vscode builds for that cursor (``peer.vscode_request``: 256 lines before, the cursor's
line split at the cursor, 64 lines after), over one kept-alive connection as VS Code's Node does.
Besides the latency the typist sees, each reply's ``Server-Timing`` says how long the bridge waited
for the appliance: the rest is what the bridge added (HTTP, JSON, building the request).
"""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.bench_report import Sample
from ctxpress.evaluation.peer import LogFile, peer_reply, stop_process, vscode_request
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.runner import percentile
from ctxpress.evaluation.typing_replay import TypingStep, replay_typing, typing_plan

START_TIMEOUT_S = 60.0
_APPLIANCE_MS = re.compile(r"appliance;dur=([0-9.]+)")


class BridgeProcess:
    """``ctxpress serve-http`` on a free loopback port for the length of a replay."""

    def __init__(self, env: dict[str, str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in env.items() if k not in ("CTXPRESS_HTTP_TOKEN", "CTXPRESS_HTTP_TOKEN_FILE")}
        self.process: subprocess.Popen[bytes] | None = None
        self.log: LogFile | None = None

    def __enter__(self) -> BridgeProcess:
        self.log = LogFile()
        self.process = self.log.start(
            [sys.executable, "-m", "ctxpress.cli", "serve-http", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ctxpress serve-http exited with {self.process.returncode}: {self.log.tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"ctxpress serve-http did not listen within {START_TIMEOUT_S:.0f} s")

    def __exit__(self, *_: object) -> None:
        stop_process(self.process)
        if self.log is not None:
            self.log.close()


async def typing_via_infill(path: Path, cfg: BenchConfig, env: dict[str, str], progress: Progress) -> list[Sample]:
    """The typing replay's pauses as llama.vscode asks at them (mode label ``infill``)."""
    _opened, _line, steps = await asyncio.to_thread(typing_plan, path, cfg)
    # named as the NATS replay names the file, so that the appliance sees the same repository and path
    where = {"X-Ctxpress-Repository": path.parent.name, "X-Ctxpress-Path": path.name}
    with BridgeProcess(env) as bridge:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:

            async def send(step: TypingStep) -> tuple[float, dict[str, Any]]:
                started = time.perf_counter()
                async with session.post(f"{bridge.url}/infill", json=vscode_request(step, cfg.max_tokens),
                                        headers=where) as response:
                    raw = await response.json()
                    latency = (time.perf_counter() - started) * 1000
                    waited = _APPLIANCE_MS.search(response.headers.get("Server-Timing", ""))
                if response.status != 200:
                    return latency, {"error": raw.get("error"), "completion": "", "context": {}}
                reply = peer_reply(raw)
                if waited is not None:
                    reply["bridge_ms"] = latency - float(waited.group(1))
                return latency, reply

            return await replay_typing(steps, cfg, send, progress, "infill")


def bridge_overhead(samples: Sequence[Sample]) -> dict[str, float | None]:
    """What the bridge added to each request: the client's latency less the bridge's wait for the appliance."""
    added = [float(s.reply["bridge_ms"]) for s in samples if "bridge_ms" in s.reply]
    return {"bridge_added_ms_p50": percentile(added, 50) if added else None,
            "bridge_added_ms_p95": percentile(added, 95) if added else None}
