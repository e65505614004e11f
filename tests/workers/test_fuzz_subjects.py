"""Fuzzing every subject the appliance listens on, through the real services: every request is
answered within its deadline with a structured error or a completion, and the workers keep
answering after each one. ``make fuzz`` runs many more examples and prints the counts."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpress_core.errors import ErrorCode
from ctxpress_core.wire.v1 import SUBJECT_CANCEL, SUBJECT_FILE_OPENED, SUBJECT_FILE_SAVED, SUBJECT_INDEX_GIT
from tests.conftest import Appliance

pytestmark = pytest.mark.services

EXAMPLES = int(os.environ.get("CTXPRESS_FUZZ_EXAMPLES", "60"))
COUNTS: dict[str, Counter[str]] = {}
REPLY_DEADLINE_S = 20.0

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                         st.text(max_size=60))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                                 st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=5)), max_leaves=20)
SOURCE_PIECES = ["def f(x):\n", "    return ", "class A:\n", "(" * 500, "x" * 5000, "😋", "\r", "\x00", '"""',
                 "{", "}", "\n" * 50, "é" * 100]
source_text = st.lists(st.one_of(st.sampled_from(SOURCE_PIECES), st.text(max_size=30)), max_size=60).map("".join)
languages = st.one_of(st.none(), st.sampled_from(["python", "rust", "c", "cpp", "go", "tsx", "text", "klingon"]))


@st.composite
def complete_requests(draw: st.DrawFn) -> bytes:
    """Mostly request-shaped, with every field at times wrong; valid ones wait at most 200 ms for
    the engine (a structured timeout or a completion), so the assembly path is what is fuzzed."""
    kind = draw(st.sampled_from(["shaped", "shaped", "shaped", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    text = draw(source_text)
    lines = text.split("\n")
    line = draw(st.one_of(st.integers(0, len(lines) - 1), st.integers(-5, 10**12)))
    request: dict[str, Any] = {
        "repository": draw(st.one_of(st.just("fuzz"), st.text(max_size=300))),
        "path": draw(st.sampled_from(["a.py", "b.rs", "c.h", "d", "../../etc/passwd", "x" * 5000, ""])),
        "text": text,
        "line": line,
        "column": draw(st.one_of(st.integers(0, 40), st.integers(-3, 10**9))),
        "language": draw(languages),
        "max_tokens": draw(st.one_of(st.integers(1, 4), st.integers(-1, 10**6))),
        "mode": draw(st.sampled_from(["optimized", "baseline", "turbo"])),
        "timeout_ms": 200,
        "budget_tokens": draw(st.one_of(st.none(), st.integers(0, 20000))),
        "recent_edits": draw(st.one_of(st.none(), st.lists(st.tuples(st.integers(-2, 10**6), st.integers(-2, 10**6)),
                                                           max_size=70))),
        "features": draw(st.one_of(st.none(), st.dictionaries(st.sampled_from(["crop", "similar", "nonsense"]),
                                                              st.booleans(), max_size=2))),
    }
    for key in draw(st.lists(st.sampled_from(sorted(request)), max_size=2)):
        request[key] = draw(json_values)  # a field of the wrong type
    return json.dumps({k: v for k, v in request.items() if v is not None}).encode()


@st.composite
def file_events(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
    event = {"repository": draw(st.text(min_size=0, max_size=20)), "path": draw(st.text(max_size=30)),
             "text": draw(source_text), "language": draw(languages),
             "line": draw(st.one_of(st.none(), st.integers(-1, 10**7))), "column": draw(st.integers(-1, 100))}
    return json.dumps({k: v for k, v in event.items() if v is not None}).encode()


async def alive(nc: Any, appliance: Appliance) -> None:
    """The completion worker still answers (an empty request: a structured error, at once)."""
    reply = json.loads((await nc.request(appliance.settings.completion_subject, b"{}", timeout=10)).data)
    assert reply["error"]["code"] == "invalid_request"


def count(subject: str, outcome: str) -> None:
    COUNTS.setdefault(subject, Counter())[outcome] += 1


def run(coro: Any) -> Any:
    return asyncio.get_event_loop_policy().get_event_loop().run_until_complete(coro)


FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


async def test_complete_subject(appliance: Appliance, nats_client: Any) -> None:
    codes = {c.value for c in ErrorCode}
    payloads: list[bytes] = []

    @FUZZ
    @given(complete_requests())
    def collect(payload: bytes) -> None:
        payloads.append(payload)

    collect()
    for payload in payloads:
        started = time.monotonic()
        reply = json.loads((await nats_client.request(appliance.settings.completion_subject, payload,
                                                      timeout=REPLY_DEADLINE_S)).data)
        assert time.monotonic() - started < REPLY_DEADLINE_S
        if "error" in reply:
            assert reply["error"]["code"] in codes and reply["error"]["message"], reply
            assert reply["error"]["code"] != "internal", (payload[:300], reply)
            count("complete", reply["error"]["code"])
        else:
            assert isinstance(reply["completion"], str)
            count("complete", "completion")
        await alive(nats_client, appliance)
    print(f"\nfuzz complete: {dict(COUNTS['complete'])}")


async def test_file_opened_feedback_and_cancel_subjects(appliance: Appliance, nats_client: Any) -> None:
    opened: list[bytes] = []
    feedback: list[bytes] = []

    @FUZZ
    @given(file_events(), st.one_of(st.binary(max_size=100), json_values.map(lambda v: json.dumps(v).encode()),
                                    st.fixed_dictionaries({"completion_id": st.text(max_size=200),
                                                           "action": st.sampled_from(["shown", "accepted", "x"]),
                                                           "chars_kept": st.integers(-5, 10**9)}).map(
                                        lambda d: json.dumps(d).encode())))
    def collect(event: bytes, fb: bytes) -> None:
        opened.append(event)
        feedback.append(fb)

    collect()
    for event, fb in zip(opened, feedback, strict=True):
        reply = json.loads((await nats_client.request(SUBJECT_FILE_OPENED, event, timeout=REPLY_DEADLINE_S)).data)
        assert "ok" in reply or reply["error"]["code"] in {c.value for c in ErrorCode}, reply
        count("file_opened", "ok" if reply.get("ok") else reply.get("error", {}).get("code", "not warmed"))
        reply = json.loads((await nats_client.request(appliance.settings.feedback_subject, fb,
                                                      timeout=REPLY_DEADLINE_S)).data)
        assert reply == {"ok": True} or reply["error"]["code"] == "invalid_request", reply
        count("feedback", "ok" if reply.get("ok") else "invalid_request")
        await nats_client.publish(SUBJECT_CANCEL, fb)  # a cancel is never answered: it must not hurt
        count("cancel", "published")
        await alive(nats_client, appliance)
    print(f"\nfuzz file_opened: {dict(COUNTS['file_opened'])}; feedback: {dict(COUNTS['feedback'])}")


async def test_index_subjects(appliance: Appliance, nats_client: Any) -> None:
    """Junk in the index stream is counted as invalid and acknowledged; the index worker keeps going."""
    events: list[tuple[str, bytes]] = []

    @FUZZ
    @given(st.sampled_from([SUBJECT_FILE_SAVED, SUBJECT_INDEX_GIT]), file_events())
    def collect(subject: str, event: bytes) -> None:
        events.append((subject, event))

    collect()

    async def status() -> dict[str, Any]:
        reply = await nats_client.request(appliance.settings.index_status_subject, b"", timeout=10)
        return json.loads(reply.data)

    before = await status()
    js = nats_client.jetstream()
    for subject, event in events[: max(10, len(events) // 3)]:
        await js.publish(subject, event)
        count("index", subject.rsplit(".", 1)[-1])
    deadline = time.monotonic() + 120
    after = await status()
    sent = sum(COUNTS["index"].values())
    while after["events"] + after["invalid"] - before["events"] - before["invalid"] < sent:
        assert time.monotonic() < deadline, (before, after, sent)
        await asyncio.sleep(0.5)
        after = await status()
    assert after["worker"] == before["worker"]  # the same process: it did not crash
    print(f"\nfuzz index: {sent} events, {after['invalid'] - before['invalid']} invalid")


async def test_a_pathological_request_does_not_freeze_the_worker(appliance: Appliance, nats_client: Any) -> None:
    """The shapes that froze the worker's event loop for minutes (a whitespace run in the function, a
    minified line at the cursor): a cheap request sent right after one is answered before it, and it
    gets a real answer."""
    blank_run = "def f(value):\n    total = value\n" + " " * 200_000 + "\n    return "
    minified = "def g():\n    return " + "a1.b2(c3, d4) + " * 20_000 + "\n"
    for text, line, column in ((blank_run, 3, len("    return ")), (minified, 1, 40_000)):
        request = {"repository": "fuzz", "path": "p.py", "text": text, "line": line, "column": column,
                   "max_tokens": 4, "timeout_ms": 60_000}
        order: list[str] = []

        async def ask(name: str, payload: bytes, order: list[str] = order) -> dict[str, Any]:
            reply = json.loads((await nats_client.request(appliance.settings.completion_subject, payload,
                                                          timeout=90)).data)
            order.append(name)
            return reply

        heavy = asyncio.ensure_future(ask("pathological", json.dumps(request).encode()))
        await asyncio.sleep(0.05)
        cheap = await ask("cheap", b"{}")
        reply = await heavy
        assert order == ["cheap", "pathological"]
        assert cheap["error"]["code"] == "invalid_request"
        assert "error" not in reply or reply["error"]["code"] not in {"internal", "invalid_request"}, reply
