"""The embedded Triton Inference Server: pytriton's bundled tritonserver serving the CPU engine.

Run as its own process (``python -m serving.engine.triton_server``); ``ctxpress up`` starts it.
The model (``serving.engine.completion_model``) is named and shaped like TensorRT-LLM's ``ensemble``
(see ``ctxpress_core.inference``) and is decoupled, so clients stream over gRPC exactly as they would
against a GPU deployment.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

from ctxpress_core.settings import Settings, get_settings
from serving.engine.completion_model import bind_completion_model
from serving.engine.cpu_engine import LlamaEngine
from serving.engine.engine_config import EngineConfig
from serving.engine.triton_workspace import short_workspace_path
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
    bind_completion_model(triton, llama, settings.run_dir / "engine-status.json", settings.batching)
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
    else:
        from serving.weights import model_path as packaged_or_given

        model_path = packaged_or_given(settings)
    (settings.state_dir / "logs").mkdir(parents=True, exist_ok=True)
    return serve(settings, model_path)


if __name__ == "__main__":
    sys.exit(main())
