"""Issue 43: a failure on the appliance's side is answered with its code and a fixed message. Before, the reply
carried what failed: ``inference failed: <the gRPC status's detail>``, the engine's address in
``inference_unavailable``, an exception's text as a ``file_opened`` reason. The detail goes to the worker's log.

The completion service as the worker runs it, with the project's in-process engine failing as a broken model
server does, and with the real Triton client of an engine that is not running."""

from __future__ import annotations

import json
import logging
import time

import pytest

from ctxpress_core.errors import SERVER_SIDE_MESSAGES, ErrorCode
from ctxpress_core.settings import Settings
from serving.engine_api import CompletionEngine
from serving.scripted_engine import ScriptedEngine
from serving.triton_client import TritonCompletionClient
from tests.conftest import free_port
from workers.completion.service import CompletionService

DETAIL = "StatusCode.INTERNAL: model at /srv/models/target.gguf on gpu-7.internal:8001 ran out of memory"
REQUEST = {"repository": "r", "path": "m.py", "text": "def add(a, b):\n    return \n", "line": 1, "column": 11,
           "max_tokens": 8}


async def _reply(engine: CompletionEngine) -> dict[str, str]:
    service = CompletionService(Settings(triton_timeout_s=5), engine, count_tokens=lambda s: max(1, len(s) // 4),
                                model_name="m")
    return dict(json.loads(await service.handle(json.dumps(REQUEST).encode(), time.perf_counter()))["error"])


async def test_an_engines_failure_reaches_the_client_as_a_code_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ctxpress.worker.completion")
    error = await _reply(ScriptedEngine(fail_with=RuntimeError(DETAIL)))
    # before: "inference failed: StatusCode.INTERNAL: model at /srv/…"
    assert error == {"code": ErrorCode.INFERENCE_FAILED, "message": SERVER_SIDE_MESSAGES[ErrorCode.INFERENCE_FAILED],
                     "details": None, "retry_after_ms": None}
    assert "gpu-7.internal" in caplog.text  # the operator still reads what failed


async def test_an_unreachable_engine_is_not_named_to_the_client(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ctxpress.worker.completion")
    port = free_port()  # nothing listens there: an engine that is not running
    engine = TritonCompletionClient(f"127.0.0.1:{port}")
    try:
        error = await _reply(engine)
    finally:
        await engine.close()
    assert error["code"] in (ErrorCode.INFERENCE_UNAVAILABLE, ErrorCode.INFERENCE_TIMEOUT), error
    assert error["message"] == SERVER_SIDE_MESSAGES[ErrorCode(error["code"])]  # before: "Triton at 127.0.0.1:…"
    assert str(port) in caplog.text
