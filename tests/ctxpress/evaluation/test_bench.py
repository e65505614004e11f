import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxpress.evaluation.bench import TEAM_FILES, _team, third_party_root
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.peer import LogFile, peer_reply, vscode_request
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.typing_replay import pick_function, typing_pauses, typing_plan

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


def test_typing_plan_types_the_body_back_and_opens_the_file_without_it(tmp_path: Path) -> None:
    source = tmp_path / "geometry.py"
    source.write_text(MODULE, encoding="utf-8")
    opened, open_line, steps = typing_plan(source, BenchConfig("nats://x", "s", typing_pauses=5))
    assert "Euclidean" not in opened and "def midpoint" in opened
    assert opened.splitlines()[open_line - 1] == "def distance(a, b):"
    assert 0 < len(steps) <= 5 and [s.typed for s in steps] == sorted(s.typed for s in steps)
    for step in steps:  # the file so far, the cursor at the end of what was typed
        lines = step.text.splitlines(keepends=True)
        assert MODULE.startswith("".join(lines[:step.line]) + lines[step.line][:step.column])
        assert MODULE[len("".join(lines[:step.line])) + step.column:].startswith(step.next_text)


def test_every_team_file_has_a_function_to_type() -> None:
    for name in TEAM_FILES:
        assert pick_function((third_party_root() / name).read_text(encoding="utf-8")) is not None, name


async def test_the_team_scenario_refuses_more_typists_than_it_has_files() -> None:
    cfg = BenchConfig("nats://127.0.0.1:1", "unused", clients=len(TEAM_FILES) + 2)
    with pytest.raises(ValueError, match="at most"):
        await _team(cfg, third_party_root(), Progress(1, "test"))


def test_the_peer_is_asked_as_llama_vscode_asks() -> None:
    text = "".join(f"line {i}\n" for i in range(400))
    step = type("Step", (), {"text": text, "line": 300, "column": 4, "next_text": ""})()
    body = vscode_request(step, 16)  # type: ignore[arg-type]
    assert body["input_prefix"] == "".join(f"line {i}\n" for i in range(44, 300))  # 256 lines before
    assert body["prompt"] == "line" and body["input_suffix"].startswith(" 300\nline 301\n")
    assert body["input_suffix"].count("\n") == 65  # the cursor line's rest + 64 lines after
    assert body["cache_prompt"] is True and body["n_predict"] == 16 and body["input_extra"] == []
    reply = peer_reply({"content": "x = 1", "timings": {"prompt_n": 40, "cache_n": 960, "predicted_n": 5}})
    assert reply["context"] == {"prompt_tokens": 1000, "cached_tokens": 960} and reply["completion"] == "x = 1"


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


def test_peer_server_errors_are_clear(tmp_path: Path, capsys: Any) -> None:
    from ctxpress.cli import main

    assert main(["bench", "--scenario", "typing", "--peer-server", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err
    binary = tmp_path / "llama-server"
    binary.write_text("")
    assert main(["bench", "--scenario", "short", "--peer-server", str(binary)]) == 2
    assert "--scenario typing" in capsys.readouterr().err


def test_a_started_server_that_logs_a_lot_is_never_blocked_by_its_log() -> None:
    # 300 KB of log, more than a pipe's buffer holds: with the log on an unread pipe the child blocks for ever
    log = LogFile()
    child = log.start([sys.executable, "-c", "import sys; sys.stderr.write('x' * 300_000 + 'end'); sys.exit(3)"])
    try:
        assert child.wait(timeout=30) == 3
        assert log.tail(10).endswith("xxxxxxxend")
    finally:
        child.kill()
        log.close()
