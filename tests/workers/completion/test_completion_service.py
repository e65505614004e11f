"""The real path: NATS -> completion worker -> Triton -> llama.cpp with the 1.5B code model."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from ctxpress_core.wire.v1 import content_hash

pytestmark = pytest.mark.services

OBVIOUS_PREFIX = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + "
OBVIOUS_SUFFIX = "\n\n\nprint(add(2, 3))\n"
OBVIOUS = OBVIOUS_PREFIX + OBVIOUS_SUFFIX
OBVIOUS_LINE, OBVIOUS_COLUMN = 2, len("    return a + ")


def valid(**over: Any) -> dict[str, Any]:
    return {"repository": "demo", "path": "math_utils.py", "text": OBVIOUS, "line": OBVIOUS_LINE,
            "column": OBVIOUS_COLUMN, "max_tokens": 8, **over}


async def ask(nc: Any, subject: str, payload: bytes, wait_s: float = 120) -> dict[str, Any]:
    reply = await nc.request(subject, payload, timeout=wait_s)
    return json.loads(reply.data)


@pytest.mark.parametrize("mode", ["baseline", "optimized"])
async def test_round_trip_completes_the_obvious(appliance: Any, nats_client: Any, mode: str) -> None:
    # The file is tiny, so optimized would send it whole: ask for the cropping path itself.
    over = {"features": {"whole_file": False}} if mode == "optimized" else {}
    reply = await ask(nats_client, appliance.settings.completion_subject,
                      json.dumps(valid(mode=mode, **over)).encode())
    assert "error" not in reply, reply
    assert reply["mode"] == mode
    assert reply["completion"].strip().startswith("b"), reply["completion"]
    assert reply["model"] and reply["finish_reason"] in {"stop", "length"}
    t = reply["timings"]
    assert t["total_ms"] >= t["prompt_ms"] > 0 and t["decode_ms"] >= 0
    ctx = reply["context"]
    if mode == "baseline":
        assert ctx["strategy"] == "window" and ctx["sources"] == ["window"]
    else:
        assert ctx["strategy"] == "ast", ctx
        enclosing = [b for b in ctx["blocks"] if b["kind"] == "function" and b["name"] == "add"]
        assert enclosing and enclosing[0]["start_line"] == 0 and enclosing[0]["form"] == "whole", ctx["blocks"]
    assert 0 < ctx["context_tokens"] <= ctx["file_tokens"] + 2
    assert ctx["prompt_tokens"] > ctx["context_tokens"]  # FIM markers on top
    assert reply["content_hash"] == content_hash(OBVIOUS)


async def test_a_file_that_fits_the_budget_is_sent_whole(appliance: Any, nats_client: Any) -> None:
    reply = await ask(nats_client, appliance.settings.completion_subject,
                      json.dumps(valid(mode="optimized")).encode())
    assert "error" not in reply, reply
    ctx = reply["context"]
    assert ctx["strategy"] == "whole-file", ctx
    assert [b["kind"] for b in ctx["blocks"]][:1] == ["file"]
    # All of it, prefix and suffix: nothing cropped, so the count is the file's own (the cut
    # at the cursor may split one token in two).
    assert ctx["file_tokens"] <= ctx["context_tokens"] <= ctx["file_tokens"] + 1


async def test_content_hash_of_a_known_file_is_enough(appliance: Any, nats_client: Any) -> None:
    subject = appliance.settings.completion_subject
    first = await ask(nats_client, subject, json.dumps(valid()).encode())
    assert "error" not in first
    by_hash = valid(text=None, content_hash=first["content_hash"])
    del by_hash["text"]
    second = await ask(nats_client, subject, json.dumps(by_hash).encode())
    assert "error" not in second, second
    assert second["completion"] == first["completion"]  # greedy decoding is deterministic
    assert second["context"]["cached_tokens"] > 0  # the engine reused the identical prompt's KV
    # from memory, not the disk tier (the file never left the pool); the engine says so
    assert second["context"]["restored_tokens"] == 0


MALFORMED: list[tuple[str, bytes, str]] = [
    ("not json", b"{nope", "invalid_json"),
    ("not an object", b"[1, 2]", "invalid_request"),
    ("missing fields", json.dumps({"repository": "r"}).encode(), "invalid_request"),
    ("wrong types", json.dumps(valid(line="two")).encode(), "invalid_request"),
    ("cursor past the end", json.dumps(valid(line=99)).encode(), "cursor_out_of_range"),
    ("column past the line", json.dumps(valid(line=0, column=500)).encode(), "cursor_out_of_range"),
    ("unknown language", json.dumps(valid(language="cobol-2099")).encode(), "unsupported_language"),
    ("unknown hash", json.dumps({**{k: v for k, v in valid().items() if k != "text"},
                                 "content_hash": "ab" * 32}).encode(), "unknown_content"),
    ("oversized", json.dumps(valid(text="x = 1\n" * 1_000_000)).encode(), "payload_too_large"),
]


@pytest.mark.parametrize(("label", "payload", "code"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_malformed_request_gets_structured_error(appliance: Any, nats_client: Any, label: str,
                                                       payload: bytes, code: str) -> None:
    started = time.perf_counter()
    reply = await ask(nats_client, appliance.settings.completion_subject, payload, wait_s=10)
    elapsed_ms = (time.perf_counter() - started) * 1000
    assert set(reply) == {"error"}, reply
    assert reply["error"]["code"] == code
    assert reply["error"]["message"]
    assert elapsed_ms < 2000, f"an error reply must be fast, took {elapsed_ms:.0f} ms"


async def test_worker_keeps_serving_after_bad_requests(appliance: Any, nats_client: Any) -> None:
    subject = appliance.settings.completion_subject
    for _, payload, _ in MALFORMED:
        await ask(nats_client, subject, payload, wait_s=10)
    reply = await ask(nats_client, subject, json.dumps(valid()).encode())
    assert "error" not in reply, reply
    assert reply["completion"].strip().startswith("b")


async def test_concurrent_requests_are_all_answered(appliance: Any, nats_client: Any) -> None:
    # Several IDEs at once: the engine serves them in turn, none hangs (this once deadlocked).
    import asyncio

    subject = appliance.settings.completion_subject
    payloads = [json.dumps(valid(max_tokens=4, request_id=f"concurrent-{i}")).encode() for i in range(3)]
    replies = await asyncio.gather(*(ask(nats_client, subject, p, wait_s=120) for p in payloads))
    assert [r.get("id") for r in replies] == [f"concurrent-{i}" for i in range(3)], replies
    assert all(r["completion"].strip().startswith("b") for r in replies)


async def test_file_opened_with_a_cursor_prewarms_and_the_file_keeps_its_kv(appliance: Any,
                                                                             nats_client: Any) -> None:
    """The engine keeps each file's prompt KV: after file_opened (with the cursor) the prompt for
    that place is processed ahead of time, and the next request there reuses nearly all of it;
    another file's request in between does not evict it (the pool has a slot per file)."""
    from ctxpress_core.wire.v1 import SUBJECT_FILE_OPENED

    subject = appliance.settings.completion_subject
    body = "".join(f"def helper_{i}(x):\n    return x * {i} + {i}\n\n\n" for i in range(40))
    text = body + "def total(values):\n    acc = 0\n    for v in values:\n        acc += helper_3(v)\n"
    line = text.count("\n") - 1
    opened = {"repository": "demo", "path": "pool_a.py", "text": text, "line": line, "column": 8}
    await nats_client.request(SUBJECT_FILE_OPENED, json.dumps(opened).encode(), timeout=30)
    status_file = appliance.settings.run_dir / "engine-status.json"
    deadline = time.monotonic() + 300  # the warm-up runs in the background, at the engine's lowest priority
    warmed, steady_since = 0, time.monotonic()
    while time.monotonic() < deadline and (warmed < 100 or time.monotonic() - steady_since < 5):
        await asyncio.sleep(0.5)
        try:
            slots = json.loads(status_file.read_text())["kv_slots"]
        except (OSError, ValueError, KeyError):
            continue
        now = max((s["tokens"] for s in slots if (s["key"] or "").endswith(":demo:pool_a.py")), default=0)
        if now != warmed:  # until it has stopped growing: the whole prompt processed
            warmed, steady_since = now, time.monotonic()
    assert warmed >= 100, "the cursor's prompt was not pre-processed"
    other = valid(path="pool_b.py", mode="optimized")
    assert "error" not in await ask(nats_client, subject, json.dumps(other).encode())  # waits for the warm-up
    request = {"repository": "demo", "path": "pool_a.py", "text": text, "line": line, "column": 8, "max_tokens": 4,
               "mode": "optimized"}
    reply = await ask(nats_client, subject, json.dumps(request).encode())
    assert "error" not in reply, reply
    ctx = reply["context"]
    assert ctx["cached_tokens"] >= ctx["prompt_tokens"] * 0.9, ctx  # the whole prompt was there already
    assert ctx["kv_bytes"] and ctx["kv_bytes"] > 0
    baseline = await ask(nats_client, subject, json.dumps({**request, "mode": "baseline"}).encode())
    assert "error" not in baseline and (baseline["context"]["cached_tokens"] or 0) < ctx["cached_tokens"]


async def test_typing_in_a_function_reprocesses_only_the_typed_tail(appliance: Any, nats_client: Any) -> None:
    """Steady excerpts: the second keystroke's prompt is the first's plus what was typed, so the
    engine processes only the tail (the excerpts before the function are kept as they were)."""
    subject = appliance.settings.completion_subject
    body = "".join(f"def helper_{i}(x):\n    return x * {i} + {i}\n\n\n" for i in range(150))
    head = body + "def total(values):\n    acc = 0\n    for v in values:\n        acc += helper_3(v)\n    "
    tail = "\n\n\ndef after(x):\n    return x\n"
    line = head.count("\n")

    def request(typed: str) -> bytes:
        return json.dumps({"repository": "demo", "path": "typing_a.py", "text": head + typed + tail, "line": line,
                           "column": 4 + len(typed), "max_tokens": 4, "mode": "optimized"}).encode()

    first = await ask(nats_client, subject, request("ret"))
    assert "error" not in first and first["context"]["strategy"] == "ast", first
    second = await ask(nats_client, subject, request("return ac"))
    assert "error" not in second, second
    ctx = second["context"]
    assert ctx["cached_tokens"] >= ctx["prompt_tokens"] - 12, ctx  # only the typed tail was processed
    assert any("kept while typing" in b["reason"] for b in ctx["blocks"][1:]), ctx["blocks"]
