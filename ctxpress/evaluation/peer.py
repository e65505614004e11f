"""The peer a user would run instead: llama.cpp's own server, asked the way llama.vscode asks.

``ctxpress bench --scenario typing --peer-server PATH/llama-server`` replays the same typing session
against it, after ours, with the same model file and the same number of tokens to predict.
Request shape (llama.vscode's ``/infill`` call): the 256 lines before the cursor line as
``input_prefix``, the cursor line up to the cursor as ``prompt``, the rest of that line and the 64
lines after as ``input_suffix``, ``cache_prompt`` on, the plugin's samplers; the server runs with
``--cache-reuse 256`` (KV chunks that moved are shifted rather than recomputed). Left out: the
plugin's ring of extra chunks from other files (none in a one-file replay) and its time caps
(``t_max_*``), so that both sides predict the same tokens.

llama-server is not part of the appliance: ``make peer`` builds it from the pinned llama.cpp (llama-cpp-python's
sdist carries the sources) for this host, caches it and prints its path (``--peer-server $(make -s peer)``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.bench_report import Sample
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.typing_replay import TypingStep, replay_typing, typing_plan

PREFIX_LINES = 256
SUFFIX_LINES = 64
CACHE_REUSE = 256
START_TIMEOUT_S = 120.0


def vscode_request(step: TypingStep, max_tokens: int) -> dict[str, Any]:
    """The body llama.vscode posts to ``/infill`` for a cursor (without its extra chunks)."""
    lines = step.text.split("\n")
    current = lines[step.line]
    return {
        "input_prefix": "".join(x + "\n" for x in lines[max(0, step.line - PREFIX_LINES):step.line]),
        "prompt": current[:step.column],
        "input_suffix": current[step.column:] + "\n" + "".join(
            x + "\n" for x in lines[step.line + 1:step.line + 1 + SUFFIX_LINES]),
        "input_extra": [],
        "n_predict": max_tokens,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PeerServer:
    """A llama-server process for the length of a replay."""

    def __init__(self, binary: Path, model: Path, threads: int, n_ctx: int = 4096) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                        "-c", str(n_ctx), "-np", "1", "-t", str(threads), "-b", "1024", "-ub", "1024",
                        "--cache-reuse", str(CACHE_REUSE)]
        self.process: subprocess.Popen[bytes] | None = None
        self.log: LogFile | None = None

    def __enter__(self) -> PeerServer:
        self.log = LogFile()
        self.process = self.log.start(self.command)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}: {self.log.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"llama-server did not become healthy in {START_TIMEOUT_S:.0f} s")

    def __exit__(self, *_: object) -> None:
        stop_process(self.process)
        if self.log is not None:
            self.log.close()

    def infill(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.post("/infill", body)

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON to ``endpoint`` (``/infill``, ``/completion``); the decoded answer."""
        request = urllib.request.Request(self.url + endpoint, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as r:
            return dict(json.loads(r.read()))


def peer_reply(raw: dict[str, Any]) -> dict[str, Any]:
    """The peer's answer in the shape ``bench.summarise`` reads: prompt tokens = processed + reused."""
    timings = raw.get("timings") or {}
    processed = int(timings.get("prompt_n") or 0)
    cached = int(timings.get("cache_n") or 0)
    return {"completion": raw.get("content", ""), "tokens_generated": timings.get("predicted_n"),
            "context": {"prompt_tokens": processed + cached, "cached_tokens": cached}}


async def peer_typing(binary: Path, model: Path, path: Path, cfg: BenchConfig, progress: Progress,
                      threads: int) -> list[Sample]:
    """The typing replay of ``path`` against llama-server (mode label ``peer``)."""
    _opened, _line, steps = await asyncio.to_thread(typing_plan, path, cfg)
    with PeerServer(binary, model, threads) as server:

        async def send(step: TypingStep) -> tuple[float, dict[str, Any]]:
            started = time.perf_counter()
            raw = await asyncio.to_thread(server.infill, vscode_request(step, cfg.max_tokens))
            return (time.perf_counter() - started) * 1000, peer_reply(raw)

        return await replay_typing(steps, cfg, send, progress, "peer")


class LogFile:
    """Where a server the benchmark starts writes its log: a temporary file, not a pipe. Nobody reads a pipe while
    the benchmark runs, and a server that logs every request blocks on its write once the pipe's buffer (64 KiB)
    is full, leaving the request it was answering hanging (llama-server did, 150 requests into a benchmark)."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()

    def start(self, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=self.file)

    def tail(self, chars: int = 2000) -> str:
        self.file.seek(0)
        return self.file.read().decode(errors="replace")[-chars:]

    def close(self) -> None:
        self.file.close()


def stop_process(process: subprocess.Popen[bytes] | None, timeout_s: float = 10.0) -> None:
    """Terminate a server the benchmark started; kill it if it does not go within ``timeout_s``."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
