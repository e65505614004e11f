"""The completion service end to end against the in-process engine (serving/scripted_engine.py): what it sends
the engine, what it answers, and a caller's cancel reaching the engine. No services, no model."""

from __future__ import annotations

import asyncio
import json
import time

from ctxpress_core.settings import Settings
from serving.fim import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from serving.scripted_engine import ScriptedEngine
from workers.completion.service import CompletionService

TEXT = "def add(a, b):\n    return \n\n\ndef sub(a, b):\n    return a - b\n"


def _service(engine: ScriptedEngine) -> CompletionService:
    return CompletionService(Settings(), engine, count_tokens=lambda s: max(1, len(s) // 4), model_name="m")


def _request(**fields: object) -> bytes:
    return json.dumps({"repository": "r", "path": "m.py", "text": TEXT, "line": 1, "column": 11, **fields}).encode()


async def test_a_request_is_answered_from_the_engines_stream() -> None:
    engine = ScriptedEngine("a + b\n")
    reply = json.loads(await _service(engine).handle(_request(max_tokens=16), time.perf_counter()))
    assert reply["completion"] == "a + b"
    assert reply["finish_reason"] == "stop" and reply["context"]["prompt_tokens"] > 0
    (sent,) = engine.requests
    assert sent.prompt.startswith(FIM_PREFIX) and FIM_SUFFIX in sent.prompt and FIM_MIDDLE in sent.prompt
    assert "    return " in sent.prompt and sent.max_tokens == 16
    assert sent.cache_key == "m:r:m.py"  # optimized, prefix_cache: the file's own KV
    assert [sent.prompt[at:].startswith((FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)) for at in sent.template_markers or ()] \
        == [True, True, True]


async def test_max_tokens_bounds_the_stream() -> None:
    engine = ScriptedEngine("one two three four five")
    reply = json.loads(await _service(engine).handle(_request(max_tokens=2), time.perf_counter()))
    assert reply["completion"] == "one two" and reply["finish_reason"] == "length"


async def test_a_callers_cancel_answers_cancelled_and_reaches_the_engine() -> None:
    engine = ScriptedEngine("x " * 50, step_s=0.05)
    service = _service(engine)
    answer = asyncio.create_task(service.handle(_request(request_id="abc"), time.perf_counter()))
    await asyncio.wait_for(engine.streaming.wait(), 30)
    assert service.cancel(json.dumps({"request_id": "abc"}).encode())
    reply = json.loads(await answer)
    assert reply["error"]["code"] == "cancelled"
    await asyncio.sleep(0.01)  # the engine is told without the reply waiting for it
    assert engine.cancelled == [engine.requests[0].request_id]


async def test_an_engine_past_the_callers_timeout_answers_inference_timeout() -> None:
    engine = ScriptedEngine("slow " * 10, step_s=1.0)
    reply = json.loads(await _service(engine).handle(_request(timeout_ms=300), time.perf_counter()))
    assert reply["error"]["code"] == "inference_timeout"
    await asyncio.sleep(0.01)
    assert engine.cancelled == [engine.requests[0].request_id]


async def test_the_engine_stops_once_the_reply_can_no_longer_change() -> None:
    # the model finishes the line, then re-types the code after the cursor and goes on: the editor gets the line,
    # and the engine is told to stop at the first re-typed line instead of running to max_tokens
    engine = ScriptedEngine("a + b\n\n\ndef sub(a, b):\n    return a - b\n" + "x = 1\n" * 40)
    reply = json.loads(await _service(engine).handle(_request(max_tokens=64), time.perf_counter()))
    assert reply["completion"] == "a + b" and reply["finish_reason"] == "stop"
    await asyncio.sleep(0.01)
    assert engine.cancelled == [engine.requests[0].request_id]


async def test_a_mid_line_cursor_stops_the_engine_at_the_line_end() -> None:
    engine = ScriptedEngine("a + b\n    c = 2\n" * 20)
    text = "def add(a, b):\n    return ()\n"
    reply = json.loads(await _service(engine).handle(_request(text=text, column=12, max_tokens=64),
                                                      time.perf_counter()))
    assert reply["completion"] == "a + b"
    await asyncio.sleep(0.01)
    assert engine.cancelled == [engine.requests[0].request_id]


async def test_a_block_still_running_is_not_stopped() -> None:
    engine = ScriptedEngine("a + b\n    # still the body\n")
    reply = json.loads(await _service(engine).handle(_request(max_tokens=64), time.perf_counter()))
    assert reply["completion"] == "a + b\n    # still the body"
    assert engine.cancelled == []


async def test_without_early_stop_the_engine_runs_to_its_limit() -> None:
    engine = ScriptedEngine("a + b\n\n\ndef sub(a, b):\n    return a - b\n" + "x = 1\n" * 40)
    reply = json.loads(await _service(engine).handle(_request(max_tokens=64, features={"early_stop": False}),
                                                     time.perf_counter()))
    assert reply["completion"] == "a + b" and reply["finish_reason"] == "length"
    assert engine.cancelled == []


async def test_a_baseline_request_gets_no_early_stop_whatever_it_asks() -> None:
    # the features are optimized mode's: the baseline is the plain path it is measured against
    engine = ScriptedEngine("a + b\n\n\ndef sub(a, b):\n    return a - b\n" + "x = 1\n" * 40)
    reply = json.loads(await _service(engine).handle(
        _request(max_tokens=64, mode="baseline", features={"early_stop": True}), time.perf_counter()))
    assert reply["completion"] == "a + b" and reply["finish_reason"] == "length"
    assert engine.cancelled == []


async def test_past_max_decode_ms_the_completion_ends_at_the_next_line_end() -> None:
    answer = "".join(f"a{i} = {i}\n    " for i in range(40))
    engine = ScriptedEngine(answer, step_s=0.01)
    reply = json.loads(await _service(engine).handle(_request(max_tokens=120, max_decode_ms=60), time.perf_counter()))
    assert reply["finish_reason"] == "length"
    lines = reply["completion"].split("\n")
    assert 1 <= len(lines) < 40 and lines[0] == "a0 = 0" and answer.startswith(reply["completion"])
    await asyncio.sleep(0.01)
    assert engine.cancelled == [engine.requests[0].request_id]


async def test_the_engine_is_told_each_users_cache_salt_and_never_their_name() -> None:
    """The salt an engine that shares KV across requests (TensorRT-LLM) scopes reuse and the reported cached
    tokens by: one per user, stable, a hash (keyed once the appliance has a secret), one for single-user."""
    engine = ScriptedEngine("a + b\n")
    service = _service(engine)
    for user in ("alice", "bob", "alice", None):
        await service.handle(_request(max_tokens=4), time.perf_counter(), user=user)
    alice, bob, alice_again, single = (r.cache_salt for r in engine.requests)
    assert alice and bob and single and len({alice, bob, single}) == 3 and alice_again == alice
    assert "alice" not in alice and "bob" not in bob
    keyed = CompletionService(Settings(cache_salt_secret="s3cret"), engine, count_tokens=lambda s: len(s) // 4 + 1,
                              model_name="m")
    await keyed.handle(_request(max_tokens=4), time.perf_counter(), user="alice")
    assert engine.requests[-1].cache_salt not in (None, alice)


async def test_a_prewarm_carries_its_users_cache_salt() -> None:
    engine = ScriptedEngine("")
    service = _service(engine)
    text = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n\n" for i in range(20)) + "def total(v):\n    acc = 0\n"
    opened = json.dumps({"repository": "r", "path": "m.py", "text": text, "line": text.count("\n") - 1,
                         "column": 8}).encode()
    assert json.loads(await service.file_opened(opened, user="bob"))["ok"]
    await asyncio.gather(*service.fill.tasks.unfinished())
    await service.handle(_request(max_tokens=4), time.perf_counter(), user="bob")
    prewarm, live = engine.requests
    assert prewarm.max_tokens == 0 and prewarm.cache_salt == live.cache_salt is not None


LONG = "".join(f"def helper_{i}(values):\n    total = 0\n    for v in values:\n        total += v * {i}\n"
               f"    return total\n\n\n" for i in range(120)) + "def main(values):\n    return \n"


async def test_a_prompt_too_slow_for_the_target_is_planned_smaller_and_the_full_one_filled_in_behind() -> None:
    engine = ScriptedEngine("helper_1(values)\n")
    service = _service(engine)
    for _ in range(20):  # the engine as a 2-core CPU measures: 10 ms a prompt token, 90 ms a generated one
        service.planner.speed.prompt_ms_per_token.update(10.0)
        service.planner.speed.decode_ms_per_token.update(90.0)
    line = LONG.count("\n") - 1
    ask = json.dumps({"repository": "r", "path": "long.py", "text": LONG, "line": line, "column": 11,
                      "max_tokens": 16}).encode()
    reply = json.loads(await service.handle(ask, time.perf_counter(), user="bob"))
    plan = reply["context"]["plan"]
    assert plan is not None and plan["budget_tokens"] < plan["full_budget_tokens"] == 1024, plan
    assert reply["context"]["budget_tokens"] == plan["budget_tokens"]
    assert reply["context"]["context_tokens"] <= plan["budget_tokens"] and plan["full_expected_ms"] > 1500
    await asyncio.gather(*service.fill.tasks.unfinished())
    answered, filled = engine.requests
    assert answered.max_tokens == 16 and filled.max_tokens == 0  # filled in at the engine's lowest priority
    # the planned prompt in a sequence of its own, so that the next keystroke's planned prompt never overwrites
    # what the fill processed
    assert answered.cache_key == f"{filled.cache_key}#plan" and filled.cache_salt == answered.cache_salt
    assert filled.cache_key == "m:bob:r:long.py"
    assert len(filled.prompt) > 2 * len(answered.prompt)
    # the next keystroke there finds the full prompt held: it is sent whole
    again = json.loads(await service.handle(ask, time.perf_counter(), user="bob"))
    assert again["context"]["plan"] is None and again["context"]["budget_tokens"] == 1024
    assert engine.requests[-1].prompt == filled.prompt


async def test_a_request_with_a_budget_of_its_own_or_the_plan_off_is_never_planned() -> None:
    engine = ScriptedEngine("x\n")
    service = _service(engine)
    for _ in range(20):
        service.planner.speed.prompt_ms_per_token.update(10.0)
    line = LONG.count("\n") - 1
    for extra in ({"budget_tokens": 900}, {"features": {"plan": False}}):
        ask = json.dumps({"repository": "r", "path": "long.py", "text": LONG, "line": line, "column": 11,
                          "max_tokens": 4, **extra}).encode()
        reply = json.loads(await service.handle(ask, time.perf_counter()))
        assert reply["context"]["plan"] is None and reply["context"]["budget_tokens"] == extra.get("budget_tokens",
                                                                                                   1024)
    assert [r.max_tokens for r in engine.requests] == [4, 4]


async def test_a_resting_cursor_gets_the_prompt_its_request_will_be_sent_processed_ahead() -> None:
    engine = ScriptedEngine("helper_1(values)\n")
    service = _service(engine)
    for _ in range(20):  # a 2-core CPU's figures: a full prompt here would be planned smaller
        service.planner.speed.prompt_ms_per_token.update(10.0)
        service.planner.speed.decode_ms_per_token.update(90.0)
    line = LONG.count("\n") - 1
    rest = json.dumps({"repository": "r", "path": "long.py", "text": LONG, "line": line, "column": 11}).encode()
    assert json.loads(await service.file_opened(rest, user="bob"))["ok"]
    await asyncio.gather(*service.fill.tasks.unfinished())
    (warmed,) = engine.requests
    assert warmed.max_tokens == 0 and len(warmed.prompt) < len(LONG) // 4  # the planned prompt, not the full one
    ask = json.dumps({"repository": "r", "path": "long.py", "text": LONG, "line": line, "column": 11,
                      "max_tokens": 16}).encode()
    reply = json.loads(await service.handle(ask, time.perf_counter(), user="bob"))
    assert reply["context"]["plan"] is not None
    assert engine.requests[1].prompt == warmed.prompt and engine.requests[1].cache_key == warmed.cache_key


def _on_a_slow_cpu(engine: ScriptedEngine) -> CompletionService:
    """A service whose engine measured as a 2-core CPU's: a long file's full prompt is planned smaller."""
    service = _service(engine)
    for _ in range(20):
        service.planner.speed.prompt_ms_per_token.update(10.0)
        service.planner.speed.decode_ms_per_token.update(90.0)
    return service


LONG_ASK = json.dumps({"repository": "r", "path": "long.py", "text": LONG, "line": LONG.count("\n") - 1,
                       "column": 11, "max_tokens": 16}).encode()


async def test_a_fill_the_engine_preempted_is_sent_again_and_only_a_whole_one_counts_as_held() -> None:
    engine = ScriptedEngine("helper_1(values)\n", preempt_warm_ups=2)
    service = _on_a_slow_cpu(engine)
    await service.handle(LONG_ASK, time.perf_counter(), user="bob")
    await asyncio.gather(*service.fill.tasks.unfinished())
    fills = [r for r in engine.requests if r.max_tokens == 0]
    assert len(fills) == 3 and len({r.prompt for r in fills}) == 1  # preempted twice, then whole
    assert service.planner.holds(fills[0].cache_key)


async def test_a_fill_preempted_every_time_is_never_counted_as_held() -> None:
    engine = ScriptedEngine("helper_1(values)\n", preempt_warm_ups=1000)
    service = _on_a_slow_cpu(engine)
    await service.handle(LONG_ASK, time.perf_counter(), user="bob")
    await asyncio.gather(*service.fill.tasks.unfinished())
    fills = [r for r in engine.requests if r.max_tokens == 0]
    assert len(fills) == 21 and not service.planner.holds(fills[0].cache_key)  # bounded: 1 + MAX_RESUMES
    again = json.loads(await service.handle(LONG_ASK, time.perf_counter(), user="bob"))
    assert again["context"]["plan"] is not None  # still planned: the engine does not hold the full prompt


async def test_a_request_during_the_engines_first_measurement_waits_for_it_and_is_planned() -> None:
    engine = ScriptedEngine("helper_1(values)\n", step_s=0.5)  # a slow engine: half a second a token
    service = CompletionService(Settings(latency_target_ms=100), engine, count_tokens=lambda s: max(1, len(s) // 4),
                                model_name="m")
    measuring = service.start_measuring()
    assert measuring is not None
    ask = json.dumps({"repository": "r", "path": "long.py", "text": LONG, "line": LONG.count("\n") - 1,
                      "column": 11, "max_tokens": 16}).encode()
    reply = json.loads(await service.handle(ask, time.perf_counter(), user="bob"))
    assert measuring.done() and engine.requests[0].max_tokens == 4  # the measurement's prompt went first
    assert reply["context"]["plan"] is not None and reply["context"]["budget_tokens"] < 1024


async def test_nothing_is_measured_where_nothing_is_planned() -> None:
    engine = ScriptedEngine("helper_1(values)\n")
    service = CompletionService(Settings(latency_target_ms=0), engine, count_tokens=lambda s: max(1, len(s) // 4),
                                model_name="m")
    assert service.start_measuring() is None
    reply = json.loads(await service.handle(LONG_ASK, time.perf_counter(), user="bob"))
    assert engine.requests[0].max_tokens == 16 and reply["context"]["plan"] is None  # the request went first
