import json
from pathlib import Path
from typing import Any

import pytest

from ctxpress.evaluation.bench import pick_function, typing_pauses

MODULE = '''import math


def distance(a, b):
    """Euclidean distance between two points."""
    dx = b[0] - a[0]
    dy = b[1] - a[1]
    squared = dx * dx + dy * dy
    result = math.sqrt(squared)
    return result


def midpoint(a, b):
    x = (a[0] + b[0]) / 2
    y = (a[1] + b[1]) / 2
    return (x, y)
'''


def test_typing_pauses_are_deterministic_and_inside_the_body() -> None:
    body = "    dx = b[0] - a[0]\n    return dx\n"
    pauses = typing_pauses(body, cps=6, debounce_ms=150, seed=3)
    assert pauses == typing_pauses(body, cps=6, debounce_ms=150, seed=3)
    assert pauses and all(0 < p < len(body) for p in pauses)
    assert pauses == sorted(set(pauses))


def test_pick_function_finds_a_body_of_the_right_size() -> None:
    start, end = pick_function(MODULE)  # type: ignore[misc]
    body = MODULE[start:end]
    assert body.startswith('    """Euclidean') and body.rstrip().endswith("return result")


@pytest.mark.services
def test_bench_typing_and_short_end_to_end(appliance: Any, tmp_path: Path) -> None:
    source = tmp_path / "geometry.py"
    source.write_text(MODULE)
    run = appliance.ctxpress("bench", "--scenario", "short", "--scenario", "typing", "--file", str(source),
                             "--requests", "1", "--typing-pauses", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    final = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(final["scenarios"]) == {"short", "typing"}
    for name, modes in final["scenarios"].items():
        for mode in ("baseline", "optimized"):
            figures = modes[mode]
            assert figures["errors"] == 0, (name, mode, figures)
            assert figures["requests"] >= 1
            assert figures["latency_ms_p95"] >= figures["latency_ms_p50"] > 0
            assert 0 <= figures["cache_hit_rate"] <= 1
            assert "draft_acceptance" in figures
    for mode in ("baseline", "optimized"):
        assert 0 <= final["scenarios"]["typing"][mode]["suggestion_match_rate"] <= 1
    # a typing replay keeps the prompt prefix warm between keystrokes
    assert final["scenarios"]["typing"]["optimized"]["cache_hit_rate"] > 0
