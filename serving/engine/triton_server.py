"""The embedded Triton Inference Server: pytriton's bundled tritonserver serving the CPU engine.

Run as its own process (``python -m serving.engine.triton_server``); ``ctxpress up`` starts it.
The model is named and shaped like TensorRT-LLM's ``ensemble`` (see ``ctxpress_core.inference``)
and is decoupled, so clients stream over gRPC exactly as they would against a GPU
deployment.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import shutil
import signal
import stat
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxpress_core import inference
from ctxpress_core.settings import Settings, get_settings
from serving.engine.abandoned import AbandonedRequests
from serving.engine.cpu_engine import LlamaEngine
from serving.engine.engine_config import EngineConfig
from serving.engine.generation import GaveWay, GenerationChunk, GenerationFigures
from serving.engine.scheduler import WINDOW_S, LatencyFirstScheduler, Ticket
from serving.weights import draft_model_path

log = logging.getLogger("ctxpress.triton")


def fix_python_stub_library_path() -> None:
    """Put this interpreter's libpython first on LD_LIBRARY_PATH.

    Triton's Python-backend stub links ``libpython3.11.so``; under pyenv the loader would
    otherwise find Debian's copy, and every model fails to load with
    ``'_thread.RLock' object has no attribute '_recursion_count'``. tritonserver is
    started by pytriton with a copy of our environment, so setting it here is enough.
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir:
        return
    current = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != libdir]
    os.environ["LD_LIBRARY_PATH"] = ":".join([libdir, *current])


# pytriton puts ZeroMQ ipc sockets in its workspace; a Unix socket path may not exceed
# 107 bytes, and "<workspace>/<model>_0_0-server.sock" must fit for every model we serve.
_SOCKET_NAME_ROOM = len("/embedder_0_0-server.sock") + 8
_SOCKET_PATH_MAX = 107


def short_workspace_path(triton_dir: Path) -> Path:
    """Where pytriton's workspace goes: under the state directory when the sockets fit.

    Otherwise a private directory in /tmp. A symbolic link would not do: pytriton resolves the
    workspace path, so the sockets would land at the long path again. The workspace holds only
    sockets and a generated model store, rebuilt on every start, so it need not be persistent.
    """
    triton_dir.mkdir(parents=True, exist_ok=True)
    workspace = (triton_dir / "workspace").resolve()
    if len(str(workspace)) + _SOCKET_NAME_ROOM > _SOCKET_PATH_MAX:
        digest = hashlib.sha256(str(triton_dir.resolve()).encode()).hexdigest()[:12]
        workspace = _private_tmp_dir(Path(tempfile.gettempdir()) / f"ctxpress-{os.getuid()}-{digest}") / "workspace"
    # pytriton insists on creating the workspace itself; a crash may have left one behind.
    shutil.rmtree(workspace, ignore_errors=True)
    return workspace


def _private_tmp_dir(path: Path) -> Path:
    """``path`` when it is a directory of ours that nobody else may enter, else a new one (``mkdtemp``).

    The name is predictable and /tmp is everyone's: another local user could create it first, open to all, and
    then reach pytriton's sockets or replace the model store it writes there (Python that Triton runs as us).
    A directory not owned by us, open to others, or a symlink is never used; we make a fresh one instead, so
    that such a user can neither get in nor stop the appliance from starting."""
    try:
        if path.is_symlink() and path.lstat().st_uid == os.getuid():  # left by an earlier version that used a link
            path.unlink()
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        log.warning("cannot create %s (%s): using a new private directory", path, exc)
        return Path(tempfile.mkdtemp(prefix=f"ctxpress-{os.getuid()}-"))
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
        return path
    log.warning("%s is not a private directory of ours (owner %d, mode %o%s): using a new one", path, info.st_uid,
                stat.S_IMODE(info.st_mode), ", a symlink" if stat.S_ISLNK(info.st_mode) else "")
    return Path(tempfile.mkdtemp(prefix=f"ctxpress-{os.getuid()}-"))


def _scalar(inputs: dict[str, np.ndarray], name: str, default: Any) -> Any:
    value = inputs.get(name)
    if value is None or value.size == 0:
        return default
    return value.reshape(-1)[0]


def _text(inputs: dict[str, np.ndarray], name: str) -> str:
    raw = _scalar(inputs, name, b"")
    return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)


def _decode_list(value: np.ndarray | None) -> list[str]:
    if value is None:
        return []
    out = []
    for item in value.reshape(-1):
        text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
        if text:
            out.append(text)
    return out


def _response(text: str, figures: GenerationFigures) -> dict[str, np.ndarray]:
    def i32(v: int) -> np.ndarray:
        return np.array([[v]], dtype=np.int32)

    return {
        "text_output": np.array([[text.encode("utf-8")]], dtype=object),
        inference.CTX_PROMPT_TOKENS: i32(figures.prompt_tokens),
        inference.CTX_CACHED_TOKENS: i32(figures.cached_tokens),
        inference.CTX_COMPLETION_TOKENS: i32(figures.completion_tokens),
        inference.CTX_DRAFT_PROPOSED: i32(figures.draft_proposed),
        inference.CTX_DRAFT_ACCEPTED: i32(figures.draft_accepted),
        inference.CTX_KV_BYTES: i32(figures.kv_bytes),
        inference.CTX_RESTORED_TOKENS: i32(figures.restored_tokens),
        inference.CTX_RESTORE_MS: i32(round(figures.restore_ms)),
        inference.CTX_FINISH_REASON: np.array([[figures.finish_reason.encode()]], dtype=object),
    }


@dataclass(frozen=True)
class _Request:
    """One completion request's inputs, decoded from Triton's tensors."""

    prompt: str
    max_tokens: int
    stream: bool
    temperature: float
    stop: list[str]
    cache_key: str | None
    speculation: str | None
    budget_ms: int  # the caller's deadline from now (0: none)
    markers: list[int] | None  # where the template's special tokens are (None: parse the whole prompt)
    request_id: str | None

    @classmethod
    def of(cls, inputs: dict[str, np.ndarray]) -> _Request:
        raw = _scalar(inputs, "text_input", b"")
        raw_markers = inputs.get(inference.CTX_TEMPLATE_MARKERS)
        return cls(
            prompt=raw.decode("utf-8") if isinstance(raw, bytes) else str(raw),
            max_tokens=int(_scalar(inputs, "max_tokens", 64)),
            stream=bool(_scalar(inputs, "stream", False)),
            temperature=float(_scalar(inputs, "temperature", 0.0)),
            stop=_decode_list(inputs.get("stop_words")),
            cache_key=_text(inputs, inference.CTX_CACHE_KEY) or None,
            speculation=_text(inputs, inference.CTX_SPECULATION) or None,
            budget_ms=int(_scalar(inputs, inference.CTX_DEADLINE_MS, 0)),
            markers=None if raw_markers is None else [int(m) for m in np.asarray(raw_markers).reshape(-1)],
            request_id=_text(inputs, inference.CTX_REQUEST_ID) or None,
        )


class CompletionModel:
    """The pytriton inference callable: one request per call (max_batch_size 1).

    An async generator on purpose: pytriton iterates a plain generator on its event loop, so
    generation would block every other request there, and two requests queued on the engine
    would deadlock (the second blocking the loop the first needs to stream). Generation runs
    on one dedicated thread instead (requests are served in arrival order) and chunks cross
    back through an asyncio queue.
    """

    def __init__(self, engine: LlamaEngine, status_path: Path | None = None, latency_first: bool = True) -> None:
        self.engine = engine
        self.status_path = status_path
        # Admission: latency-first (a 5 ms window, urgent requests first, earliest deadline first,
        # warm-ups last, a prompt giving way to a request due before it) or plain arrival order;
        # one thread runs what is admitted, since the engine serves one request at a time.
        self._latency_first = latency_first
        self._scheduler: LatencyFirstScheduler[Callable[[], None]] = LatencyFirstScheduler(
            window_s=WINDOW_S if latency_first else 0.0)
        self._ready = threading.Condition()
        self.abandoned = AbandonedRequests()
        threading.Thread(target=self._run_admitted, name="llama", daemon=True).start()

    def cancel(self, requests: list[Any]) -> list[dict[str, np.ndarray]]:
        """The cancel model: each named request is abandoned (see ``AbandonedRequests``)."""
        out = []
        for request in requests:
            known = self.abandoned.cancel(_text(request.data, inference.CTX_REQUEST_ID))
            out.append({"ok": np.array([[int(known)]], dtype=np.int32)})
        return out

    def _submit(self, job: Callable[[], None], *, warm: bool, cost_s: float = 0.0,
                ticket: Ticket | None = None) -> Ticket:
        with self._ready:
            ticket = self._scheduler.submit(job, warm=warm and self._latency_first, cost_s=cost_s, ticket=ticket)
            self._ready.notify()
        return ticket

    def _run_admitted(self) -> None:
        while True:
            with self._ready:
                # one at a time: the next is chosen when this one is done, among all then queued
                while not (batch := self._scheduler.next_batch(limit=1)):
                    self._ready.wait(timeout=self._scheduler.wait_s())
            for job in batch:
                try:
                    job()
                except Exception:  # e.g. the caller's event loop closed: the next requests still run
                    log.exception("a request's job failed outside the engine")

    def _estimate(self, prompt: str, markers: list[int] | None, cache_key: str | None,
                  max_tokens: int) -> tuple[list[int], float]:
        """The prompt's tokens and its expected service time in seconds."""
        tokens = self.engine.tokenize(prompt, markers)
        return tokens, self.engine.expected_ms(tokens, cache_key, max_tokens) / 1000

    def _due_before(self, deadline: float) -> bool:
        with self._ready:
            return self._scheduler.earlier_than(deadline)

    async def __call__(self, requests: list[Any]) -> AsyncIterator[list[dict[str, np.ndarray]]]:
        # One piece on purpose: the job that runs on the engine thread (``produce``, which queues itself
        # again when it gives way) and its helpers are closures over this request's queue, event loop,
        # ticket and watch, which the streaming loop at the end shares with them.
        # Decoupled: each yield is one response per request of this call.
        assert len(requests) == 1, "the CPU engine is bound with max_batch_size=1"
        req = _Request.of(requests[0].data)
        watch = self.abandoned.watch(req.request_id,
                                     time.monotonic() + req.budget_ms / 1000 if req.budget_ms > 0 else None)

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[GenerationChunk | BaseException | None] = asyncio.Queue()
        live = req.max_tokens > 0  # max_tokens=0 is a warm-up, which gives way to live requests
        by_deadline = live and self._latency_first
        cost_s, tokens = 0.0, None
        if by_deadline:
            try:  # tokenizing is CPU work: off the event loop (the engine then uses these tokens)
                tokens, cost_s = await loop.run_in_executor(None, self._estimate, req.prompt, req.markers,
                                                            req.cache_key, req.max_tokens)
            except Exception as exc:  # the engine reports a bad prompt itself; admitted in arrival order
                log.debug("no cost estimate: %s", exc)
        ticket: list[Ticket] = []  # set once queued (the engine may start before _submit returns)

        def give_way() -> bool:
            # an abandoned request stops at its next chunk too, keeping the KV it has processed
            return watch.abandoned() or (bool(ticket) and self._due_before(ticket[0].deadline))

        def finish_abandoned(stage: str, started: float, figures: GenerationFigures | None = None) -> None:
            self.abandoned.record(stage, (time.perf_counter() - started) * 1000)
            done = figures or GenerationFigures(prompt_tokens=len(tokens or ()))
            done.finish_reason = "cancelled"
            loop.call_soon_threadsafe(queue.put_nowait, GenerationChunk(text="", figures=done, final=True))
            self._write_status()
            loop.call_soon_threadsafe(queue.put_nowait, None)

        def produce(carried: GaveWay | None = None) -> None:
            if live:
                self.engine.live_waiting -= 1
            started = time.perf_counter()
            if watch.abandoned():  # nobody waits for it any more: never computed
                finish_abandoned("queued", started)
                return
            try:
                chunks = self.engine.generate(req.prompt, max_tokens=req.max_tokens, temperature=req.temperature,
                                              stop=req.stop, cache_key=req.cache_key, speculation=req.speculation,
                                              give_way=give_way if (by_deadline or watch.watched) else None,
                                              carried=carried, tokens=tokens, markers=req.markers)
                for chunk in chunks:
                    if not chunk.final and watch.abandoned():
                        chunks.close()  # stops between decode steps; the KV so far stays in the pool
                        finish_abandoned("decode", started, chunk.figures)
                        return
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
                self.abandoned.record_served((time.perf_counter() - started) * 1000)
            except GaveWay as stepped:  # queued again with its first arrival and deadline
                if watch.abandoned():
                    finish_abandoned("prompt", started)
                    return
                self.abandoned.record_served((time.perf_counter() - started) * 1000)
                log.info("a prompt (%s) gave way to a request due earlier after %d tokens", req.cache_key,
                         stepped.processed)
                if live:
                    self.engine.live_waiting += 1
                # (the except clause unbinds its name: the job gets the exception as an argument)
                self._submit(functools.partial(produce, stepped), warm=False, ticket=ticket[0] if ticket else None)
                return
            except BaseException as exc:  # handed to the caller, which turns it into a Triton error
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            self._write_status()
            loop.call_soon_threadsafe(queue.put_nowait, None)

        if live:
            self.engine.live_waiting += 1
        ticket.append(self._submit(produce, warm=not live, cost_s=cost_s))
        pieces: list[str] = []
        finished = False
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                if item.final:
                    # Streaming clients already have the text; a non-streaming one gets it all now.
                    yield [_response("" if req.stream else "".join(pieces), item.figures)]
                elif req.stream:
                    yield [_response(item.text, item.figures)]
                else:
                    pieces.append(item.text)
            finished = True
        finally:
            # Also when the stream is closed under us (the client went away): the engine drops
            # or stops the request instead of finishing it for nobody.
            self.abandoned.forget(watch, cancel=not finished)

    def _write_status(self) -> None:
        """`ctxpress status` reads the engine's state (pool, speculation, degradations) from here."""
        if self.status_path is None:
            return
        try:
            tmp = self.status_path.with_suffix(".tmp")
            st = self._scheduler.stats
            waits = sorted(st.waits_ms)
            status = {**self.engine.status(), "abandoned": self.abandoned.snapshot(), "admission": {
                "latency_first": self._latency_first, "released": st.released, "batches": st.batches,
                "urgent": st.urgent, "warm": st.warm,
                "wait_ms_p95": waits[int(0.95 * (len(waits) - 1))] if waits else None}}
            # Owner only: the pool's keys name each user's repository and path.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)  # an older file keeps its mode through O_CREAT
                f.write(json.dumps(status))
            tmp.replace(self.status_path)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.status_path, exc)


def _bind_completion_model(triton: Any, engine: LlamaEngine, status_path: Path | None = None,
                           latency_first: bool = True) -> None:
    from pytriton.model_config import ModelConfig, Tensor

    def spec(t: inference.TensorSpec, *, output: bool = False) -> Tensor:
        dtype = {"BYTES": bytes, "INT32": np.int32, "FP32": np.float32, "BOOL": np.bool_}[t.triton_dtype]
        # Triton has no optional outputs; this engine always produces every figure.
        return Tensor(name=t.name, dtype=dtype, shape=t.dims, optional=t.optional and not output)

    model = CompletionModel(engine, status_path, latency_first)
    triton.bind(
        model_name=inference.COMPLETION_MODEL,
        infer_func=model,
        inputs=[spec(t) for t in inference.COMPLETION_INPUTS],
        outputs=[spec(t, output=True) for t in inference.COMPLETION_OUTPUTS + inference.FIGURE_OUTPUTS],
        config=ModelConfig(batching=True, max_batch_size=1, decoupled=True),
        strict=False,
    )
    triton.bind(
        model_name=inference.CANCEL_MODEL,
        infer_func=model.cancel,
        inputs=[Tensor(name=inference.CTX_REQUEST_ID, dtype=bytes, shape=(1,))],
        outputs=[Tensor(name="ok", dtype=np.int32, shape=(1,))],
        config=ModelConfig(batching=False),
        strict=False,
    )


def serve(settings: Settings, model_path: Path) -> int:
    fix_python_stub_library_path()
    from pytriton.triton import Triton, TritonConfig

    engine = EngineConfig(
        model_path=model_path, n_ctx=settings.n_ctx, n_threads=settings.n_threads, kv_type=settings.kv_cache_type,
        n_slots=settings.kv_pool_slots, draft_model_path=draft_model_path(settings),
        speculation=settings.speculation, kv_disk_dir=settings.state_dir / "kv",
        kv_disk_budget_bytes=settings.kv_disk_budget_mb * 1024 * 1024,
    )
    log.info("loading %s", model_path)
    llama = LlamaEngine(engine)
    workspace = short_workspace_path(settings.state_dir / "triton")
    config = TritonConfig(
        http_address=settings.triton_bind_host,
        http_port=settings.triton_http_port,
        grpc_address=settings.triton_bind_host,
        grpc_port=settings.triton_grpc_port,
        metrics_address=settings.metrics_bind_host,
        metrics_port=settings.triton_metrics_port,
        allow_metrics=True,
        allow_cpu_metrics=True,
        allow_gpu_metrics=False,
        exit_timeout_secs=5,
        log_file=settings.state_dir / "logs" / "tritonserver.log",
    )
    triton = Triton(config=config, workspace=workspace)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %s: stopping Triton", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    _bind_completion_model(triton, llama, settings.run_dir / "engine-status.json", settings.batching)
    from serving.engine.embedder import bind_embedder

    bind_embedder(triton, settings)
    triton.run()
    log.info("Triton ready: grpc %s:%s, metrics :%s", settings.triton_bind_host, settings.triton_grpc_port,
             settings.triton_metrics_port)
    status = 0
    while not stop.wait(1.0):
        if not triton.is_alive():
            log.error("tritonserver died")
            status = 1
            break
    triton.stop()
    try:
        log.info("kept the KV of %d files on disk", llama.save_pool())
    except Exception:  # the disk tier is optional: the next start recomputes instead
        log.exception("saving the KV pool to disk failed")
    return status


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = get_settings()
    if len(sys.argv) > 1:
        model_path = Path(sys.argv[1])
    elif settings.model_path:
        model_path = settings.model_path
    else:
        from serving.weights import TARGET, ensure_model

        model_path = ensure_model(TARGET, settings.models_dir)
    (settings.state_dir / "logs").mkdir(parents=True, exist_ok=True)
    return serve(settings, model_path)


if __name__ == "__main__":
    sys.exit(main())
