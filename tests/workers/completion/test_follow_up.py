"""The suggestion after the one shown, computed before it is asked for (workers/completion/follow_up.py), against
the in-process engine: answered from the work done when the editor asks after a Tab, superseded by anything else."""

from __future__ import annotations

import asyncio
import json
import time

from ctxpress_core.settings import Settings
from serving.scripted_engine import ScriptedEngine
from workers.completion.follow_up import accepted
from workers.completion.service import CompletionService

TEXT = "def add(a, b):\n    return \n\n\ndef sub(a, b):\n    return a - b\n"
ACCEPTED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def _service(engine: ScriptedEngine) -> CompletionService:
    return CompletionService(Settings(), engine, count_tokens=lambda s: max(1, len(s) // 4), model_name="m")


def _request(text: str = TEXT, line: int = 1, column: int = 11, follow_up: bool = True) -> bytes:
    return json.dumps({"repository": "r", "path": "m.py", "text": text, "line": line, "column": column,
                       "features": {"follow_up": follow_up}}).encode()


async def _settled(service: CompletionService) -> None:
    for _, task in list(service.follow_ups._held.values()):
        await asyncio.wait({task}, timeout=30)


def test_accepting_inserts_the_suggestion_at_the_cursor_and_moves_the_cursor_after_it() -> None:
    assert accepted(TEXT, 1, 11, "a + b") == (ACCEPTED, 1, 16)
    text, line, column = accepted("x = (\n)\n", 0, 5, "\n    1,\n    2") or ("", 0, 0)
    assert (text, line, column) == ("x = (\n    1,\n    2\n)\n", 2, 5)
    assert accepted(TEXT, 99, 0, "a") is None and accepted(TEXT, 1, 40, "a") is None


async def test_the_request_after_a_tab_is_answered_from_the_follow_up() -> None:
    engine = ScriptedEngine("a + b\n")
    service = _service(engine)
    first = json.loads(await service.handle(_request(), time.perf_counter()))
    assert first["completion"] == "a + b" and not first["context"]["precomputed"]
    await _settled(service)
    assert len(engine.requests) == 2  # the answer, then its follow-up
    assert "    return a + b" in engine.requests[1].prompt
    after_tab = json.loads(await service.handle(_request(ACCEPTED, 1, 16), time.perf_counter()))
    assert after_tab["context"]["precomputed"] and after_tab["completion"] == "a + b"
    assert after_tab["content_hash"] != first["content_hash"]
    await _settled(service)
    assert len(engine.requests) == 3  # no new work for the request after the Tab: only the next follow-up


async def test_a_request_after_a_tab_joins_the_follow_up_still_running() -> None:
    engine = ScriptedEngine("a + b\n", step_s=0.2)
    service = _service(engine)
    await service.handle(_request(), time.perf_counter())
    after_tab = json.loads(await service.handle(_request(ACCEPTED, 1, 16), time.perf_counter()))
    assert after_tab["context"]["precomputed"] and after_tab["completion"] == "a + b"
    assert len(engine.requests) == 2 and engine.cancelled == []


async def test_anything_else_the_user_does_supersedes_the_follow_up() -> None:
    engine = ScriptedEngine("a + b\n", step_s=0.2)
    service = _service(engine)
    await service.handle(_request(), time.perf_counter())
    for _ in range(500):  # the follow-up reaches the engine
        if len(engine.requests) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(engine.requests) == 2
    typed = TEXT.replace("    return \n", "    return a\n", 1)
    other = json.loads(await service.handle(_request(typed, 1, 12), time.perf_counter()))
    assert not other["context"]["precomputed"]
    await asyncio.sleep(0.05)
    assert engine.requests[1].request_id in engine.cancelled  # the engine was told at once


async def test_no_follow_up_unless_asked_for() -> None:
    engine = ScriptedEngine("a + b\n")
    service = _service(engine)
    await service.handle(_request(follow_up=False), time.perf_counter())
    await asyncio.sleep(0.05)
    assert len(engine.requests) == 1 and len(service.follow_ups) == 0

