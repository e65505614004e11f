"""`ctxpress eval --benchmark` through the real appliance: requests over NATS, completions run with tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxpress.evaluation.humaneval import BENCHMARKS, default_data_dir

pytestmark = [
    pytest.mark.services,
    pytest.mark.skipif(not (default_data_dir() / BENCHMARKS["humaneval-single"][0]).is_file(),
                       reason="no HumanEval infilling data"),
]


def test_benchmark_through_the_appliance(appliance: Any, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    run = appliance.ctxpress("eval", "--benchmark", "humaneval-single", "--limit", "2", "--seed", "3",
                             "--max-tokens", "24", "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    final = json.loads(run.stdout.strip().splitlines()[-1])
    assert final["benchmark"]["n"] == 2 and final["benchmark"]["selection"] == "seeded sample, seed 3"
    figures = final["arms"]["optimized"]
    assert figures["n"] == 2 and figures["errors"] == 0
    assert 0 <= figures["pass_at_1"] <= 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["arm"] for r in rows] == ["optimized", "optimized"]
    for row in rows:
        # every row was answered by the worker and run with its tests
        assert row["status"] in {"passed", "failed", "timeout"} and "completion" in row
        assert row["passed"] == float(row["status"] == "passed")
    assert "ctxpress optimized" in run.stdout
    assert "humaneval-single [" in run.stderr  # the progress bar


def test_benchmark_arguments_are_checked(appliance: Any) -> None:
    both = appliance.ctxpress("eval", "--benchmark", "humaneval-single", "--cases", "x.jsonl")
    assert both.returncode == 2 and "one of --cases or --benchmark" in both.stderr
    missing = appliance.ctxpress("eval", "--benchmark", "humaneval-span", "--peer-server", "/nonexistent/llama")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    alone = appliance.ctxpress("eval", "--benchmark", "humaneval-span", "--mode", "none")
    assert alone.returncode == 2 and "--mode none needs --peer-server" in alone.stderr
