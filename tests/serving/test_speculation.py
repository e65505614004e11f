"""n-gram proposals and the speculation policy (pure logic; the engine tests verify outputs)."""

from __future__ import annotations

from serving.engine.speculation import SpeculationPolicy, expected_tokens_per_step, ngram_proposal


def test_ngram_proposes_what_followed_the_latest_earlier_occurrence() -> None:
    history = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert ngram_proposal(history, 2) == [7, 8]  # the latest match wins, not the first
    assert ngram_proposal(history, 10) == [7, 8, 1, 2, 3]


def test_ngram_without_a_match_proposes_nothing() -> None:
    assert ngram_proposal([1, 2, 3, 4, 5, 6], 4) == []
    assert ngram_proposal([1], 4) == []
    assert ngram_proposal([1, 2, 1, 2], 0) == []


def test_expected_tokens_per_step() -> None:
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert abs(expected_tokens_per_step(0.5, 1) - 1.5) < 1e-9
    assert expected_tokens_per_step(0.9, 8) > expected_tokens_per_step(0.9, 2)


def test_policy_prefers_ngram_when_drafting_is_free_and_often_right() -> None:
    policy = SpeculationPolicy(draft_available=True)
    for _ in range(30):
        policy.record_acceptance("ngram", 4, 3)
        policy.record_step(1, 75.0)
        policy.record_step(5, 95.0)
    policy.explore_every = 10**9
    choice = policy.choose(max_tokens=64, draft_prompt_tokens=1500)
    assert choice.method == "ngram" and choice.k >= 2 and choice.expected_speedup > 1.5


def test_policy_turns_speculation_off_when_it_does_not_pay() -> None:
    policy = SpeculationPolicy(draft_available=True)
    for _ in range(40):
        policy.record_acceptance("ngram", 4, 0)
        policy.record_acceptance("draft", 3, 0)
        policy.record_step(1, 75.0)
        policy.record_step(5, 160.0)
    choices = [policy.choose(max_tokens=64, draft_prompt_tokens=800).method for _ in range(20)]
    assert choices.count("none") >= 16  # and now and then each method again, to re-measure it
    assert "ngram" in choices


def test_draft_model_loses_when_its_prompt_cost_dominates() -> None:
    policy = SpeculationPolicy(draft_available=True)
    for _ in range(40):
        policy.record_acceptance("ngram", 4, 0)
        policy.record_acceptance("draft", 3, 3)
        policy.record_step(1, 75.0)
        policy.record_step(4, 85.0)
        policy.record_draft(prompt_tokens=1000, prompt_ms=6000.0, tokens=3, token_ms=60.0)
    policy.explore_every = 10**9  # this test is about the estimate, not exploration
    assert policy.choose(max_tokens=16, draft_prompt_tokens=2000).method != "draft"
    assert policy.choose(max_tokens=16, draft_prompt_tokens=0).method == "draft"


def test_exploring_the_draft_waits_for_a_cheap_request() -> None:
    policy = SpeculationPolicy(draft_available=True)
    for _ in range(40):
        policy.record_acceptance("draft", 3, 0)
        policy.record_draft(prompt_tokens=1000, prompt_ms=5000.0, tokens=3, token_ms=100.0)
    # A cold 1,000-token prompt would cost the draft ~5 s: never explored on such requests...
    cold = [policy.choose(max_tokens=16, draft_prompt_tokens=1000, allowed=("draft",)).method for _ in range(30)]
    assert "draft" not in cold
    # ...but on the next request whose draft prompt is (nearly) cached, it is.
    assert policy.choose(max_tokens=16, draft_prompt_tokens=10, allowed=("draft",)).method == "draft"
