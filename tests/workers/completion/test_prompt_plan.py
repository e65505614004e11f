"""The prompt planned to the latency target: what the engine's measured speed and its cache say a request affords."""

from __future__ import annotations

from ctxpress_core import inference
from serving.engine_api import CompletionResult
from workers.completion.prompt_plan import EngineSpeed, PromptPlanner, Sized


def _result(prompt: int, cached: int, generated: int, first_ms: float, total_ms: float) -> CompletionResult:
    return CompletionResult("x", "stop", {inference.CTX_PROMPT_TOKENS: prompt, inference.CTX_CACHED_TOKENS: cached,
                                          inference.CTX_COMPLETION_TOKENS: generated}, first_ms, total_ms)


def _measured(prompt_ms: float, decode_ms: float, tokens: int) -> PromptPlanner:
    planner = PromptPlanner(target_ms=1500, min_tokens=128)
    for _ in range(30):  # a moving average: enough replies make it the engine's figures
        first = 500 * prompt_ms + decode_ms
        planner.speed.observe(_result(520, 20, tokens, first, first + (tokens - 1) * decode_ms))
    return planner


def test_the_speed_is_learned_from_replies_with_the_cached_part_and_one_decode_step_taken_out() -> None:
    speed = EngineSpeed.prior()
    assert not speed.prompt_ms_per_token.samples
    for _ in range(40):
        speed.observe(_result(1020, 20, 11, 1000 * 7.0 + 50.0, 1000 * 7.0 + 50.0 + 10 * 50.0))
    assert abs(speed.prompt_ms_per_token.value - 7.0) < 0.05
    assert abs(speed.decode_ms_per_token.value - 50.0) < 0.5
    assert abs(speed.completion_tokens.value - 11) < 0.1
    before = speed.prompt_ms_per_token.value
    speed.observe(_result(1020, 1000, 5, 300.0, 500.0))  # 20 uncached tokens say nothing of the prefill rate
    speed.observe(_result(200, 0, 0, 900.0, 900.0))  # nor does a warm-up, which gives way to live requests
    assert speed.prompt_ms_per_token.value == before


def test_a_cold_prompt_that_cannot_fit_the_target_is_planned_down_to_what_the_engine_affords() -> None:
    planner = _measured(prompt_ms=4.0, decode_ms=50.0, tokens=10)  # decode ~500 ms: ~1,000 ms left for the prompt
    plan = planner.plan("k", Sized("p" * 4000, 1000, 1024), max_tokens=64, left_ms=10_000)
    assert plan is not None
    assert 200 <= plan.budget_tokens <= 260 and plan.full_budget_tokens == 1024 and plan.cached_tokens == 0
    assert plan.full_expected_ms > 1500 and plan.target_ms == 1500 and "target" in plan.reason


def test_a_prompt_the_engine_mostly_holds_is_sent_whole() -> None:
    planner = _measured(prompt_ms=4.0, decode_ms=50.0, tokens=10)
    held = "h" * 3900 + "old tail"
    planner.sent("k", held)
    assert planner.plan("k", Sized("h" * 3900 + "new tail!", 1000, 1024), max_tokens=64, left_ms=10_000) is None
    # another file's key holds nothing of it
    assert planner.plan("other", Sized("h" * 3900 + "new tail!", 1000, 1024), 64, 10_000) is not None


def test_the_plan_never_goes_below_its_floor_and_shrinks_with_the_time_left() -> None:
    planner = _measured(prompt_ms=20.0, decode_ms=120.0, tokens=16)  # a busy host: nothing is affordable
    plan = planner.plan("k", Sized("p" * 4000, 1000, 1024), max_tokens=64, left_ms=10_000)
    assert plan is not None and plan.budget_tokens == 128
    fast = _measured(prompt_ms=0.2, decode_ms=8.0, tokens=16)  # a GPU's figures: the full budget fits
    assert fast.plan("k", Sized("p" * 4000, 1000, 1024), max_tokens=64, left_ms=10_000) is None
    squeezed = fast.plan("k", Sized("p" * 4000, 1000, 1024), max_tokens=64, left_ms=300)  # others' work ahead
    assert squeezed is not None and squeezed.budget_tokens < 1024 and squeezed.target_ms == 300


def test_nothing_is_planned_before_the_engine_was_measured_or_with_the_target_off() -> None:
    assert PromptPlanner(1500, 128).plan("k", Sized("p" * 4000, 1000, 1024), 64, 10_000) is None
    off = _measured(prompt_ms=20.0, decode_ms=120.0, tokens=16)
    off.target_ms = 0
    assert off.plan("k", Sized("p" * 4000, 1000, 1024), 64, 10_000) is None


def test_the_held_prompts_are_bounded() -> None:
    planner = PromptPlanner(1500, 128)
    for i in range(2000):
        planner.sent(f"k{i}", "x")
    assert len(planner._held) == 512 and "k1999" in planner._held and "k0" not in planner._held


def test_a_prompt_measured_as_costing_nothing_plans_without_dividing_by_it() -> None:
    planner = _measured(prompt_ms=0.0, decode_ms=200.0, tokens=16)  # its first token all one decode step
    assert planner.speed.prompt_ms_per_token.value == 0.0
    plan = planner.plan("k", Sized("p" * 4000, 1000, 1024), max_tokens=64, left_ms=10_000)
    assert plan is not None and plan.budget_tokens == 128  # the decode alone is over the target: the floor
