"""The HumanEval infilling scorer: tasks as an editor holds them, canonical solutions pass, broken ones
fail, the table (no services; the data files in ../shared/bench/human-eval-infilling)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ctxpress.evaluation.humaneval import (
    BENCHMARKS,
    BenchmarkConfig,
    Task,
    choose,
    default_data_dir,
    editor_view,
    load_tasks,
    paired,
    paired_lines,
    plain_fim_prompt,
    program,
    quality,
    report_lines,
    reported_line,
    run_benchmark,
    score_task,
    sign_test_p,
    summarise,
)

DATA = default_data_dir()
needs_data = pytest.mark.skipif(not (DATA / BENCHMARKS["humaneval-single"][0]).is_file(),
                                reason=f"no HumanEval infilling data in {DATA}")

TOY = Task(
    task_id="Toy/0/L1", entry_point="add",
    prompt='def add(a, b):\n    """Sum of a and b."""\n',
    suffix="    return total\n",
    canonical_solution="    total = a + b\n",
    test="def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
)


def by_id(benchmark: str, task_id: str) -> Task:
    return next(t for t in load_tasks(benchmark, DATA) if t.task_id == task_id)


def test_a_whole_line_hole_is_an_empty_line_with_the_cursor_at_column_0() -> None:
    view = editor_view(TOY)
    lines = view.text.split("\n")
    assert (view.line, view.column) == (2, 0)
    assert lines[view.line] == ""  # the empty line the developer opened
    assert lines[view.line + 1] == "    return total"
    assert view.before + view.after == view.text


def test_the_completion_is_inserted_as_returned_at_the_cursor() -> None:
    source = program(TOY, "    total = a + b")
    assert source.startswith(TOY.prompt + "    total = a + b\n" + TOY.suffix)
    assert source.rstrip().endswith("check(add)")


def test_a_span_hole_keeps_the_cursor_inside_its_line() -> None:
    span = Task("Toy/0/1", "add", "def add(a, b):\n    return a ", "b\n", "+ ", TOY.test, whole_lines=False)
    view = editor_view(span)
    assert (view.line, view.column) == (1, len("    return a "))
    assert score_task(span, "+ ")["passed"] == 1.0
    assert score_task(span, "- ")["passed"] == 0.0


def test_the_toy_task_passes_with_its_solution_and_fails_without() -> None:
    assert score_task(TOY, "    total = a + b")["passed"] == 1.0
    wrong = score_task(TOY, "    total = a - b")
    assert wrong["passed"] == 0.0 and wrong["status"] == "failed" and "AssertionError" in wrong["test_output"]
    assert score_task(TOY, "")["passed"] == 0.0  # NameError: the line was never written


@needs_data
@pytest.mark.parametrize("benchmark", sorted(BENCHMARKS))
def test_canonical_solutions_pass(benchmark: str) -> None:
    tasks = choose(load_tasks(benchmark, DATA), 12, seed=7)
    for task in tasks:
        scored = score_task(task, task.canonical_solution)
        assert scored["passed"] == 1.0, (task.task_id, scored.get("test_output"))
        assert scored["exact_match"] == 1.0 and scored["edit_similarity"] == 1.0


@needs_data
@pytest.mark.parametrize(("benchmark", "task_id", "broken"), [
    # the loop over the wrong range: valid Python, wrong answer
    ("humaneval-single", "SingleLineInfilling/HumanEval/0/L0", "    for idx, elem in enumerate(numbers[:1]):"),
    # the right line missing: the loop body refers to names never bound
    ("humaneval-single", "SingleLineInfilling/HumanEval/0/L0", ""),
    # the block re-typed as a no-op
    ("humaneval-multi", "MultiLineInfilling/HumanEval/0/L0_L5", "    pass"),
    # a span that parses but computes something else
    ("humaneval-span", "RandomSpanInfillingLight/HumanEval/0/1",
     "\n            if idx != idx2:\n                distance = abs(elem + elem2)"),
])
def test_broken_solutions_fail(benchmark: str, task_id: str, broken: str) -> None:
    task = by_id(benchmark, task_id)
    assert score_task(task, task.canonical_solution)["passed"] == 1.0
    scored = score_task(task, broken)
    assert scored["passed"] == 0.0, task_id
    assert scored["exact_match"] == 0.0 and scored["edit_similarity"] < 1.0


@needs_data
def test_a_completion_that_loops_forever_fails_at_the_time_limit() -> None:
    task = by_id("humaneval-single", "SingleLineInfilling/HumanEval/0/L0")
    scored = score_task(task, "    while True: pass\n    for idx, elem in enumerate(numbers):", timeout_s=1.5)
    assert scored["status"] == "timeout" and scored["passed"] == 0.0


@needs_data
def test_a_completion_that_writes_outside_its_directory_fails(tmp_path: Path) -> None:
    task = by_id("humaneval-single", "SingleLineInfilling/HumanEval/0/L0")
    target = tmp_path / "escaped.txt"
    scored = score_task(task, f"    open({str(target)!r}, 'w').write('x')\n    for idx, elem in enumerate(numbers):")
    assert scored["passed"] == 0.0 and "PermissionError" in scored["test_output"]
    assert not target.exists()


@needs_data
def test_a_completion_that_exhausts_memory_fails() -> None:
    task = by_id("humaneval-single", "SingleLineInfilling/HumanEval/0/L0")
    scored = score_task(task, "    hog = bytearray(64 * 1024 ** 3)\n    for idx, elem in enumerate(numbers):")
    assert scored["passed"] == 0.0 and "MemoryError" in scored["test_output"]


@needs_data
def test_the_seeded_sample_is_stable_and_in_file_order() -> None:
    tasks = load_tasks("humaneval-multi", DATA)
    assert len(tasks) == 5815
    first, again, other = choose(tasks, 60, 0), choose(tasks, 60, 0), choose(tasks, 60, 1)
    assert [t.task_id for t in first] == [t.task_id for t in again]
    assert [t.task_id for t in first] != [t.task_id for t in other]
    order = {t.task_id: i for i, t in enumerate(tasks)}
    assert [order[t.task_id] for t in first] == sorted(order[t.task_id] for t in first)
    assert len(choose(tasks, None, 0)) == 5815


@needs_data
def test_the_data_files_have_the_readme_s_counts() -> None:
    assert {name: len(load_tasks(name, DATA)) for name in BENCHMARKS} == {
        "humaneval-single": 1033, "humaneval-multi": 5815, "humaneval-span": 164}


def test_an_unknown_benchmark_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_tasks("humaneval-everything", tmp_path)


def test_an_unknown_feature_is_refused_with_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from ctxpress.cli import main

    assert main(["eval", "--benchmark", "humaneval-single", "--limit", "1", "--features=-bogus"]) == 2
    assert "unknown feature 'bogus'" in capsys.readouterr().err


def test_the_plain_fim_prompt_is_prefix_suffix_middle() -> None:
    assert plain_fim_prompt(TOY) == ("<|fim_prefix|>" + TOY.prompt + "<|fim_suffix|>\n" + TOY.suffix
                                     + "<|fim_middle|>")


def test_the_canonical_arm_runs_without_services(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    config = BenchmarkConfig("toy", "nats://unused", "unused", [], 64, canonical=True)
    rows = asyncio.run(run_benchmark([TOY], config, out))
    assert rows["canonical"][0]["passed"] == 1.0
    assert out.read_text().count("\n") == 1


def test_summary_counts_a_failed_request_as_a_miss() -> None:
    rows: list[dict[str, Any]] = [
        {"passed": 1.0, "exact_match": 1.0, "edit_similarity": 1.0, "status": "passed", "latency_ms": 100.0},
        {"passed": 0.0, "exact_match": 0.0, "edit_similarity": 0.5, "status": "timeout", "latency_ms": 300.0,
         "finish_reason": "length"},
        {"error": "RuntimeError"},
    ]
    figures = summarise(rows)
    assert figures["n"] == 3 and figures["errors"] == 1
    assert figures["pass_at_1"] == pytest.approx(1 / 3)
    assert figures["exact_match"] == 0.5 and figures["timeouts"] == 1 and figures["cut_at_token_limit"] == 1
    lines = report_lines("humaneval-single", {"optimized": figures},
                         {"n": 3, "total": 1033, "selection": "seeded sample, seed 0", "max_tokens": 64})
    assert "ctxpress optimized" in lines[2] and "33.3" in lines[2]
    assert any("Qwen2.5-Coder-1.5B (base)" in line and "77.0" in line and "2409.12186" in line for line in lines)


def test_the_first_line_is_scored_as_the_qwen_report_scores_it() -> None:
    expected = "    return x + 1\n"
    assert quality("    return x + 1\n    print(x)\n", expected)["first_line_match"] == 1.0
    assert quality("    return x + 1\n    print(x)\n", expected)["exact_match"] == 0.0
    assert quality("\n    return x + 1", expected)["first_line_match"] == 1.0  # a leading break: the next line
    assert quality("    return x - 1\n    return x + 1", expected)["first_line_match"] == 0.0
    assert reported_line("") == "" and reported_line("\n") == ""


def test_paired_counts_only_the_tasks_where_the_arms_disagree() -> None:
    first = [{"task_id": t, "passed": p} for t, p in (("a", 1.0), ("b", 1.0), ("c", 0.0), ("d", 0.0))]
    second = [{"task_id": t, "passed": p} for t, p in (("a", 1.0), ("b", 0.0), ("c", 1.0), ("d", 0.0))]
    assert paired(first, second) == (1, 1)
    assert paired(first, [{"task_id": "a", "error": "x"}]) == (2, 0)  # an unanswered task is a miss
    assert sign_test_p(1, 1) == 1.0 and sign_test_p(0, 0) == 1.0
    assert sign_test_p(8, 0) == pytest.approx(2 / 256)
    assert sign_test_p(0, 8) == sign_test_p(8, 0)
    assert "on 1 tasks, the reverse on 1" in paired_lines({"optimized": first, "llama-server": second})[0]
