"""The shards benchmark's pure parts: the files it picks, the costs it reads from the answers, its report."""

from __future__ import annotations

import json
from pathlib import Path

from ctxpress.evaluation.shards_bench import FILE_LINES, _costs, bench_files, report_lines


def test_files_are_cut_to_their_first_lines_with_the_cursor_at_the_end(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n")
    (tmp_path / "long.py").write_text("".join(f"value_{i} = {i}\n" for i in range(FILE_LINES + 40)))
    files = bench_files(tmp_path, 5)
    assert [f.path for f in files] == ["long.py"]
    (only,) = files
    assert len(only.text.splitlines()) == FILE_LINES and only.line == FILE_LINES - 1
    assert only.column == len(f"value_{FILE_LINES - 1} = {FILE_LINES - 1}")
    body = json.loads(only.request())
    assert body["text"].splitlines()[body["line"]][:body["column"]].startswith("value_")
    refused = json.loads(only.refused())
    assert refused["line"] >= len(refused["text"].splitlines())  # past the end: answered without the engine


def test_costs_come_from_the_answers_that_carry_them() -> None:
    answers = [{"timings": {"prompt_ms": 100.0, "decode_ms": 50.0, "context_ms": 5.0},
                "context": {"prompt_tokens": 400, "retrieval": {"elapsed_ms": 3.0}}},
               {"error": {"code": "inference_timeout"}}]
    assert _costs(answers) == {"n": 1, "engine_ms_p50": 150.0, "context_ms_p50": 5.0, "retrieval_ms_p50": 3.0,
                               "prompt_tokens_p50": 400.0}


def test_the_report_names_every_figure() -> None:
    side = {"p50_ms": 7.0, "p95_ms": 20.0, "n": 30}
    figures = {
        "shards": 2, "files": 6, "files_per_shard": {"0": 3, "1": 3},
        "gateway_hop": {"through_gateway": side, "direct_to_shard": side, "added_p50_ms": 4.0, "added_p95_ms": 9.0},
        "gateway_cached_completion": {"through_gateway": side, "direct_to_shard": side, "added_p50_ms": 1.0,
                                      "added_p95_ms": 2.0},
        "per_request": {"engine_ms_p50": 500.0, "context_ms_p50": 9.0, "retrieval_ms_p50": 4.0,
                        "prompt_tokens_p50": 700.0},
        "gateway_capacity": {"through_gateway": {"per_s": 300.0, "concurrency": 16},
                             "direct_to_shard": {"per_s": 600.0}},
        "stickiness": {"on_its_shard": 1.0, "requests": 36, "min_share": 1.0},
        "failover": {"rerouted_ms": 12.0, "first_answer_s": 9.5, "first_answer_by_shard": 1,
                     "warm_share_first_request": 0.0, "warm_share_second_request": 1.0,
                     "back_on_its_shard_after_restart_s": 20.0},
        "planned_restart": {"restored_from_disk_share": 1.0, "restored_tokens_mean": 446.0},
    }
    text = "\n".join(report_lines(figures))
    for needle in ("+4.0/+9.0 ms", "300 requests/s", "100.0% of 36", "rerouted 12 ms", "446 tokens", "engine 500.0 ms"):
        assert needle in text, needle
