"""Abandoned requests on the real Triton server: a cancelled request is dropped from the engine's
queue, or stopped at its next prompt chunk or decode step; one past its caller's deadline is not
computed; the engine counts them and keeps serving.

Prompts come from third-party code installed in the venv (never the standard library)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from serving.engine_api import EngineRequest, complete
from serving.fim import STOP_WORDS, fim_prompt
from serving.triton_client import TritonCompletionClient

pytestmark = pytest.mark.services


def _cold_prompt(offset: int, lines: int = 80) -> str:
    import sqlalchemy.orm.session as module

    assert module.__file__ is not None
    source = Path(module.__file__).read_text(encoding="utf-8").splitlines(keepends=True)
    return fim_prompt("".join(source[offset:offset + lines]) + "        return ", "\n")


def _abandoned(status_path: Path) -> dict[str, Any]:
    return json.loads(status_path.read_text()).get("abandoned", {}) if status_path.exists() else {}


async def test_cancel_stops_a_running_prompt_and_drops_a_queued_one(appliance: Any) -> None:
    client = TritonCompletionClient(appliance.settings.effective_triton_url())
    status_path = appliance.settings.run_dir / "engine-status.json"
    try:
        # queued behind whatever a fresh appliance's engine still does (the worker measures it at start), so the
        # engine is idle when the first request below arrives
        await complete(client, EngineRequest(fim_prompt("def sub(a, b):\n    return ", "\n"), 2,
                                             stop_words=STOP_WORDS, request_id="before-cancel", deadline_ms=120_000))
        before = _abandoned(status_path)
        running = asyncio.create_task(complete(client, EngineRequest(
            _cold_prompt(1200), 32, stop_words=STOP_WORDS, cache_key="cancel-running", speculation="none",
            request_id="cancel-running", deadline_ms=300_000)))
        await asyncio.sleep(1.0)  # its prompt is being processed
        # the second is longer: due after the first, it waits behind it (a shorter one of the same user goes first)
        queued = asyncio.create_task(complete(client, EngineRequest(
            _cold_prompt(1600, 200), 32, stop_words=STOP_WORDS, cache_key="cancel-queued", speculation="none",
            request_id="cancel-queued", deadline_ms=300_000)))
        await asyncio.sleep(0.5)
        # Live in the engine's queue by now on a quiet host; on a busy one the cancel may come first, and the
        # engine keeps it for the request's arrival: dropped from the queue either way, never computed.
        await client.cancel("cancel-queued")
        assert await client.cancel("cancel-running")
        stopped, dropped = await asyncio.wait_for(asyncio.gather(running, queued), 120)
        assert stopped.finish_reason == "cancelled" and dropped.finish_reason == "cancelled"
        assert dropped.text == "" and dropped.figures.get("ctx_completion_tokens", 0) == 0
        after = _abandoned(status_path)
        assert after["queued"] == before.get("queued", 0) + 1
        assert after["prompt"] + after["decode"] == before.get("prompt", 0) + before.get("decode", 0) + 1
        # an unknown id is no error, and the engine still serves
        assert not await client.cancel("never-sent")
        ok = await complete(client, EngineRequest(fim_prompt("def add(a, b):\n    return ", "\n"), 4,
                                                  stop_words=STOP_WORDS, request_id="after-cancel",
                                                  deadline_ms=120_000))
        assert ok.finish_reason in {"stop", "length"} and ok.text.strip()
    finally:
        await client.close()


async def test_a_request_past_its_deadline_is_not_computed(appliance: Any) -> None:
    client = TritonCompletionClient(appliance.settings.effective_triton_url())
    status_path = appliance.settings.run_dir / "engine-status.json"
    try:
        blocker = asyncio.create_task(complete(client, EngineRequest(
            _cold_prompt(2000), 8, stop_words=STOP_WORDS, cache_key="deadline-blocker", speculation="none",
            deadline_ms=300_000)))
        await asyncio.sleep(0.5)
        before = _abandoned(status_path)
        with pytest.raises(Exception) as timed_out:  # the caller gives up after 0.5 s...
            await complete(client, EngineRequest(_cold_prompt(2400), 8, stop_words=STOP_WORDS,
                                                 cache_key="deadline-late", request_id="deadline-late",
                                                 deadline_ms=500))
        assert type(timed_out.value).__name__ == "InferenceTimeout"
        await asyncio.wait_for(blocker, 300)
        # ...and the engine, which was busy, drops it instead of computing it. The blocker gives way to it (due
        # sooner) at its next chunk: on a host where that comes after the late request's deadline, the late one is
        # dropped from the queue; where it comes sooner, at its own first chunk boundary past the deadline.
        def dropped(counts: dict[str, Any]) -> int:
            return counts.get("queued", 0) + counts.get("prompt", 0)

        for _ in range(40):
            await asyncio.sleep(0.5)
            if dropped(_abandoned(status_path)) > dropped(before):
                break
        assert dropped(_abandoned(status_path)) == dropped(before) + 1
    finally:
        await client.close()


async def test_a_stream_ends_its_pieces_with_the_reason_and_stops_once_settled(appliance: Any) -> None:
    client = TritonCompletionClient(appliance.settings.effective_triton_url())
    prefix = "import os\n\n\ndef list_files(root):\n    out = []\n    for "
    prompt = fim_prompt(prefix, "\n")
    try:
        pieces = [p async for p in client.stream(EngineRequest(prompt, 40, stop_words=STOP_WORDS, speculation="none",
                                                               request_id="whole"))]
        # only the last piece says why the completion ended: a reason on every piece would read as the end
        assert len(pieces) > 3 and all(p.finish is None for p in pieces[:-1])
        assert pieces[-1].finish in {"stop", "length"}
        whole = "".join(p.text for p in pieces)
        assert whole.count("\n") >= 2  # the body goes on for several lines
        seen: list[str] = []
        settled = await complete(client, EngineRequest(prompt, 40, stop_words=STOP_WORDS, speculation="none",
                                                       request_id="settled", deadline_ms=120_000),
                                 settled=lambda t: not seen.append(t))
        assert seen == [settled.text] and settled.finish_reason == "stop"
        assert "\n" in settled.text and whole.startswith(settled.text) and len(settled.text) < len(whole)
    finally:
        await client.close()
