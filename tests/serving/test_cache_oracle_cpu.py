"""The GPU host's cached-token check (benchmarks/cache_oracle.py) against the embedded CPU engine: the salt input
goes over the wire the engine accepts, and the CPU pool, keyed by user, tells alice nothing of bob's prompt."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.cache_oracle import problems, run

pytestmark = pytest.mark.services


async def test_the_gpu_checks_probe_passes_on_the_cpu_engine(appliance: Any) -> None:
    figures = await run(appliance.settings.effective_triton_url(), engine_salt=False, lines=30)
    assert problems(figures) == []
    assert figures["bob_first"] == 0 and figures["bob_repeat"] and figures["alice"] == 0
