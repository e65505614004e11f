"""The demo's closing lines, cold against warm (ctxpress.demo.latency_summary): pure, no appliance."""

from ctxpress.demo import latency_summary


def reply(wall_ms: float, prompt: int, cached: int, matched: bool = False) -> dict:
    return {"wall_ms": wall_ms, "context": {"prompt_tokens": prompt, "cached_tokens": cached}, "matched": matched}


def test_the_summary_sets_the_files_first_completion_against_the_typing_replay_after_its_first() -> None:
    lines = latency_summary([reply(9552, 918, 0), reply(3000, 900, 600)],
                            [reply(9000, 950, 20, True), reply(1200, 950, 900, True), reply(1000, 960, 940),
                             reply(1400, 970, 950, True)])
    text = "\n".join(lines)
    assert "cold: the file's first completion 9,552 ms (918 prompt tokens, 0 from cache)" in text
    assert ("warm: while typing, 3 completions after the replay's first (9,000 ms): median 1,200 ms, p95 1,400 ms; "
            "97 % of prompt tokens from cache") in text
    assert "3 of 4 typing suggestions were what was typed next; warm is 8.0x faster than cold" in text


def test_without_cursors_the_replays_first_is_the_cold_one_and_without_completions_nothing() -> None:
    lines = latency_summary([], [reply(9000, 950, 0), reply(1000, 960, 940)])
    assert "  cold: the file's first completion 9,000 ms (950 prompt tokens, 0 from cache)" in lines
    assert any(line.startswith("  warm: while typing, 1 completions") for line in lines)
    only_cold = latency_summary([reply(9552, 918, 0)], [])
    assert any(line.startswith("  cold:") for line in only_cold) and not any("warm" in x for x in only_cold)
    assert latency_summary([], []) == []
