"""Latency-first admission on the real Triton server: a short request queued behind a cold prompt
is served first (the cold prompt gives way between chunks), and the cold prompt, run again from
where it stopped, completes as it would have uninterrupted.

Prompts come from third-party code installed in the venv (never the standard library)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from serving.engine_api import EngineRequest, complete
from serving.fim import STOP_WORDS, fim_prompt
from serving.triton_client import TritonCompletionClient

pytestmark = pytest.mark.services


def _cold_prompt() -> str:
    import sqlalchemy.orm.session as module

    assert module.__file__ is not None
    lines = Path(module.__file__).read_text(encoding="utf-8").splitlines(keepends=True)
    return fim_prompt("".join(lines[1400:1480]) + "        return ", "\n" + "".join(lines[1481:1490]))


async def test_a_short_request_passes_a_cold_prompt_queued_before_it(appliance: Any) -> None:
    client = TritonCompletionClient(appliance.settings.effective_triton_url())
    status_path = appliance.settings.run_dir / "engine-status.json"
    gave_way_before = json.loads(status_path.read_text()).get("gave_way", 0) if status_path.exists() else 0
    finished: dict[str, float] = {}

    async def ask(name: str, prompt: str, key: str, max_tokens: int) -> Any:
        result = await complete(client, EngineRequest(prompt, max_tokens, stop_words=STOP_WORDS, cache_key=key,
                                                      speculation="none", deadline_ms=300_000))
        finished[name] = time.monotonic()
        return result

    try:
        cold = asyncio.create_task(ask("cold", _cold_prompt(), "admission-cold", 8))
        await asyncio.sleep(1.0)  # the cold prompt is being processed
        short = await ask("short", fim_prompt("def add(a, b):\n    return ", "\n"), "admission-short", 4)
        interrupted = await cold
        assert finished["short"] < finished["cold"]
        # what its first attempt processed is not counted as cached (but for a shared first token)
        assert short.text.strip() and interrupted.figures["ctx_cached_tokens"] <= 1
        status = json.loads(status_path.read_text())
        assert status["gave_way"] > gave_way_before
        # the same prompt uninterrupted, in a sequence of its own: the same completion
        alone = await ask("alone", _cold_prompt(), "admission-alone", 8)
        assert alone.text == interrupted.text
    finally:
        await client.close()
