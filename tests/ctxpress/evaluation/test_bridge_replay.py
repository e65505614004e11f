"""``ctxpress bench --via infill``: the typing replay through ``ctxpress serve-http``, end to end."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ctxpress.evaluation.test_bench import MODULE


@pytest.mark.services
def test_bench_typing_via_infill_reports_the_bridge_beside_nats(appliance: Any, tmp_path: Path) -> None:
    source = tmp_path / "geometry.py"
    source.write_text(MODULE)
    run = appliance.ctxpress("bench", "--scenario", "typing", "--file", str(source), "--mode", "optimized",
                             "--typing-pauses", "2", "--via", "infill")
    assert run.returncode == 0, run.stdout + run.stderr
    typing = json.loads(run.stdout.strip().splitlines()[-1])["scenarios"]["typing"]
    assert set(typing) == {"optimized", "infill"}
    infill = typing["infill"]
    assert (infill["requests"], infill["errors"]) == (typing["optimized"]["requests"], 0)
    # the same document at the same pauses (a short file: llama.vscode's 256 + 64 lines hold all of it)
    assert infill["prompt_tokens_mean"] == typing["optimized"]["prompt_tokens_mean"]
    assert 0 <= infill["suggestion_match_rate"] <= 1
    assert infill["latency_ms_p50"] > infill["bridge_added_ms_p50"] >= 0
    assert "bridge_added_ms_p50" in run.stdout


def test_via_infill_needs_the_typing_scenario(capsys: Any) -> None:
    from ctxpress.cli import main

    assert main(["bench", "--scenario", "short", "--via", "infill"]) == 2
    assert "--via infill replays the typing scenario" in capsys.readouterr().err
