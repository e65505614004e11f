"""`ctxpress serve-http` started as a user starts it, asked with the request bodies the peer plugins
send (written from their source, see docs/editors.md for the versions), against the real appliance."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import openai
import pytest

from ctxpress_core.wire.v1 import SUBJECT_FILE_OPENED
from tests.conftest import Appliance, free_port
from tests.ctxpress.lsp.test_lsp_server import (
    CURSOR,
    SOURCE,
    cancelled_in_worker,
    captured_requests,
    feedback_landed,
)

pytestmark = pytest.mark.services

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WHERE = {"X-Ctxpress-Repository": "http-demo", "X-Ctxpress-Path": "pkg/math_utils.py"}
LINES = SOURCE.split("\n")
BEFORE = "".join(line + "\n" for line in LINES[:CURSOR[0]])  # the lines above the cursor's
LINE_PREFIX, LINE_SUFFIX = LINES[CURSOR[0]][:CURSOR[1]], LINES[CURSOR[0]][CURSOR[1]:]
AFTER = LINE_SUFFIX + "\n" + "\n".join(LINES[CURSOR[0] + 1:])
# A prompt the engine needs seconds for: still running when the client goes away.
LONG_PREFIX = "".join(f"def function_{i}(value):\n    return value * {i} + {i * 7}\n\n" for i in range(120))


@dataclass
class Bridge:
    url: str
    process: subprocess.Popen[str]


def start_bridge(env: dict[str, str], *args: str) -> Bridge:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "ctxpress.cli", "serve-http", "--port", str(port), *args],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return Bridge(f"http://127.0.0.1:{port}", process)
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError(f"serve-http did not start: {process.communicate()[0]}")


def stop_bridge(bridge: Bridge) -> str:
    bridge.process.terminate()
    try:
        out, _ = bridge.process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        bridge.process.kill()
        out, _ = bridge.process.communicate()
    print(out[-4000:])
    return out


@pytest.fixture(scope="module")
def bridge(appliance: Appliance) -> Iterator[Bridge]:
    running = start_bridge({**appliance.env, "CTXPRESS_HTTP_TOKEN": TOKEN})
    yield running
    out = stop_bridge(running)
    assert "listening on http://127.0.0.1:" in out and "stopped;" in out


def vscode_infill(n_predict: int = 12) -> dict[str, Any]:
    """llama.vscode 0.0.63 ``createRequestPayload`` (src/llama-server.ts): n_prefix/n_suffix lines around the
    cursor, the cursor line's start as ``prompt``, ``n_predict`` as configured (12 here, to keep tests short)."""
    return {"id_slot": 0, "input_prefix": BEFORE, "input_suffix": AFTER,
            "input_extra": [{"text": "import math\n", "time": 1733360000000, "filename": "/work/pkg/other.py"}],
            "prompt": LINE_PREFIX, "n_predict": n_predict, "n_cmpl": 3, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "n_indent": 4,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 2500}


VIM_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
              "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
              "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached"]


def vim_infill() -> dict[str, Any]:
    """llama.vim ``llama#fim`` (autoload/llama.vim): the same split, ``response_fields`` naming nested fields."""
    return {"id_slot": 0, "input_prefix": BEFORE, "input_suffix": AFTER,
            "input_extra": [{"text": "import math\n", "time": [1733360000, 12], "filename": "pkg/other.py"}],
            "prompt": LINE_PREFIX, "n_predict": 12, "stop": [], "n_indent": 4, "top_k": 40, "top_p": 0.90,
            "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 250, "response_fields": VIM_FIELDS}


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(
            url, data=body if isinstance(body, bytes) else json.dumps(body),
            headers={"Content-Type": "application/json", **(headers or {})},
            timeout=aiohttp.ClientTimeout(total=300)) as response:
        return response.status, await response.text()


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers or {}) as response:
        return response.status, await response.text()


async def test_llama_vscode_infill_gets_a_completion_in_llama_cpp_shape(
        appliance: Appliance, bridge: Bridge, nats_client: Any) -> None:
    seen, sub = await captured_requests(nats_client, appliance.settings.completion_subject)
    status, text = await post(f"{bridge.url}/infill", vscode_infill(), {**AUTH, **WHERE})
    assert status == 200, text
    reply = json.loads(text)
    assert reply["content"].startswith("a + b"), reply
    assert set(reply["timings"]) >= {"prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                                     "predicted_per_second"}
    assert isinstance(reply["tokens_cached"], int) and reply["generation_settings"]["n_ctx"] > 0
    await asyncio.sleep(0.3)
    assert len(seen) == 1
    sent = seen[0]
    assert (sent["repository"], sent["path"], sent["language"]) == ("http-demo", "pkg/math_utils.py", "python")
    assert (sent["line"], sent["column"]) == CURSOR and sent["text"] == SOURCE
    assert sent["max_tokens"] == 12 and sent["scenario"] == "http-infill"
    await sub.unsubscribe()


async def test_llama_vim_infill_honours_response_fields_in_one_compact_line(bridge: Bridge) -> None:
    status, text = await post(f"{bridge.url}/infill", vim_infill(), {**AUTH, **WHERE})
    assert status == 200, text
    assert "\n" not in text and re.search(r'"content"\s*:"', text), text  # llama.vim's check before decoding
    reply = json.loads(text)
    assert set(reply) == set(VIM_FIELDS)
    assert reply["content"].startswith("a + b") and reply["timings/predicted_n"] >= 1


async def test_n_predict_zero_warms_the_file_and_predicts_nothing(
        appliance: Appliance, bridge: Bridge, nats_client: Any) -> None:
    opened: list[dict[str, Any]] = []
    arrived = asyncio.Event()

    async def on(msg: Any) -> None:
        opened.append(json.loads(msg.data))
        arrived.set()

    sub = await nats_client.subscribe(SUBJECT_FILE_OPENED, cb=on)
    await nats_client.flush()
    warm = {**vscode_infill(), "n_predict": 0, "samplers": [], "t_max_predict_ms": 1, "response_fields": [""]}
    status, text = await post(f"{bridge.url}/infill", warm, {**AUTH, **WHERE})
    assert (status, json.loads(text)) == (200, {})
    await asyncio.wait_for(arrived.wait(), 10)
    assert [(o["path"], o["text"], o["line"], o["column"]) for o in opened] == [
        ("pkg/math_utils.py", SOURCE, *CURSOR)]
    # llama.vim's ring update: no text around a cursor, only other files' chunks: nothing to warm
    ring = {"input_prefix": "", "input_suffix": "", "prompt": "", "n_predict": 0, "input_extra": [
        {"text": "x = 1\n", "time": [1, 2], "filename": "a.py"}], "response_fields": [""]}
    status, text = await post(f"{bridge.url}/infill", ring, AUTH)
    assert (status, text) == (200, "{}")
    await asyncio.sleep(0.5)
    assert len(opened) == 1
    await sub.unsubscribe()


async def test_every_endpoint_answers_401_without_the_token(bridge: Bridge) -> None:
    wrong = {"Authorization": "Bearer not-the-token-at-all"}
    for headers in ({}, wrong, {"Authorization": TOKEN}):
        assert (await get(f"{bridge.url}/health", headers))[0] == 401
        assert (await get(f"{bridge.url}/v1/health", headers))[0] == 401
        assert (await get(f"{bridge.url}/no/such/route", headers))[0] == 401
        for path, body in (("/infill", vscode_infill()), ("/v1/completions", {"segments": {"prefix": "x"}}),
                           ("/v1/events", {"type": "view", "completion_id": "x", "choice_index": 0}),
                           ("/v1/fim/completions", {"prompt": "x"})):
            status, text = await post(f"{bridge.url}{path}", body, headers)
            assert status == 401 and json.loads(text)["error"]["code"] == 401, (path, text)
    assert (await get(f"{bridge.url}/health", AUTH)) == (200, '{"status":"ok"}')


def tabby_segments() -> dict[str, Any]:
    """tabby-agent 1.9.0-dev ``buildRequest`` (src/codeCompletion/buildRequest.ts): up to 20 lines each side,
    the path relative to the git root, the origin's URL; declarations and snippets when the editor has them."""
    return {"language": "python", "segments": {
        "prefix": BEFORE + LINE_PREFIX, "suffix": AFTER, "filepath": "pkg/math_utils.py",
        "git_url": "https://github.com/example/http-demo.git",
        "declarations": [{"filepath": "pkg/other.py", "body": "def sub(a, b): ..."}],
        "relevant_snippets_from_changed_files": [{"filepath": "pkg/other.py", "body": "x = 1", "score": 0.5}]},
        "temperature": None}


async def test_tabby_agent_health_completion_and_events_as_feedback(
        appliance: Appliance, bridge: Bridge, nats_client: Any) -> None:
    status, text = await get(f"{bridge.url}/v1/health", AUTH)
    assert status == 200, text
    health = json.loads(text)
    assert health["device"] == "cpu" and health["version"]["git_describe"].startswith("ctxpress-")

    seen, sub = await captured_requests(nats_client, appliance.settings.completion_subject)
    status, text = await post(f"{bridge.url}/v1/completions", tabby_segments(), AUTH)
    assert status == 200, text
    reply = json.loads(text)
    assert len(reply["choices"]) == 1 and reply["choices"][0]["index"] == 0
    suggestion = reply["choices"][0]["text"]
    assert suggestion.startswith("a + b"), reply
    await asyncio.sleep(0.3)
    assert [(s["repository"], s["path"], s["line"], s["column"]) for s in seen] == [
        ("http-demo", "pkg/math_utils.py", *CURSOR)]
    await sub.unsubscribe()

    # the agent's events: shown, then accepted (its body carries select_kind too; the query does for "line")
    completion_id = reply["id"]
    for event in ({"type": "view", "completion_id": completion_id, "choice_index": 0, "view_id": "view-1"},
                  {"type": "select", "completion_id": completion_id, "choice_index": 0, "view_id": "view-1",
                   "elapsed": 850}):
        assert (await post(f"{bridge.url}/v1/events", event, AUTH)) == (200, "")
    rows = await feedback_landed(appliance, completion_id, {"accepted", "shown"})
    assert {(r.action, r.chars_kept) for r in rows} == {("shown", None), ("accepted", len(suggestion))}

    status, text = await post(f"{bridge.url}/v1/events", {"type": "click", "completion_id": "x", "choice_index": 0},
                              AUTH)
    assert status == 400 and "type" in json.loads(text)["error"]["message"]


async def test_continue_openai_completions_stream_parsed_by_the_openai_client(
        appliance: Appliance, bridge: Bridge, nats_client: Any) -> None:
    """Continue's ``openai`` provider for a model without FIM (core/llm/llms/OpenAI.ts
    ``_legacystreamComplete``): its Qwen multi-file template filled in, streamed."""
    seen, sub = await captured_requests(nats_client, appliance.settings.completion_subject)
    prompt = (f"<|repo_name|>http-demo\n<|file_sep|>pkg/other.py\nimport math\n<|file_sep|>pkg/math_utils.py\n"
              f"<|fim_prefix|>{BEFORE + LINE_PREFIX}<|fim_suffix|>{AFTER}<|fim_middle|>")
    client = openai.AsyncOpenAI(base_url=f"{bridge.url}/v1", api_key=TOKEN, max_retries=0,
                                default_headers={"X-Ctxpress-Repository": "http-demo"})
    stream = await client.completions.create(model="qwen2.5-coder", prompt=prompt, max_tokens=12, stream=True,
                                             stop=["<|endoftext|>", "\n\n"], temperature=0.01)
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text.startswith("a + b"), chunks
    assert chunks[-1].choices[0].finish_reason in {"stop", "length"}
    await asyncio.sleep(0.3)
    assert [(s["path"], s["line"], s["column"], s["text"]) for s in seen] == [("pkg/math_utils.py", *CURSOR, SOURCE)]
    await sub.unsubscribe()
    await client.close()


async def test_continue_fim_completions_stream_and_whole(bridge: Bridge) -> None:
    """Continue's FIM providers (``_streamFim``, Mistral/Codestral's API): ``prompt`` before the cursor,
    ``suffix`` after, chunks read as ``choices[0].delta.content``."""
    client = openai.AsyncOpenAI(base_url=f"{bridge.url}/v1", api_key=TOKEN, max_retries=0, default_headers=WHERE)
    body = {"model": "codestral-latest", "prompt": BEFORE + LINE_PREFIX, "suffix": AFTER, "max_tokens": 12,
            "temperature": 0.01, "top_p": None, "stop": ["\n\n"], "stream": True}
    stream = await client.post("/fim/completions", body=body, cast_to=object, stream=True,
                               stream_cls=openai.AsyncStream[object])
    events = [event async for event in stream]
    assert all(isinstance(e, dict) and e["object"] == "chat.completion.chunk" for e in events), events
    text = "".join(e["choices"][0]["delta"]["content"] for e in events)
    assert text.startswith("a + b"), events

    status, raw = await post(f"{bridge.url}/v1/fim/completions", {**body, "stream": False}, {**AUTH, **WHERE})
    assert status == 200, raw
    whole = json.loads(raw)
    assert whole["choices"][0]["message"]["content"] == text and whole["usage"]["completion_tokens"] >= 1
    await client.close()


async def test_bad_input_gets_a_clear_error_and_the_bridge_keeps_serving(appliance: Appliance,
                                                                         bridge: Bridge) -> None:
    cases: list[tuple[str, bytes | dict[str, Any], int, str]] = [
        ("/infill", b"{not json", 400, "JSON"),
        ("/infill", {"input_prefix": 5}, 400, "input_prefix"),
        ("/infill", {"prompt": "x", "n_predict": "many"}, 400, "n_predict"),
        ("/infill", {"prompt": "x", "stream": True}, 400, "stream"),
        ("/infill", b"x" * (appliance.settings.max_request_bytes + 1), 413, "CTXPRESS_MAX_REQUEST_BYTES"),
        ("/v1/completions", b"[1, 2]", 400, "object"),
        ("/v1/completions", {"segments": {"suffix": "no prefix"}}, 400, "prefix"),
        ("/v1/completions", {"max_tokens": 4}, 400, "prompt"),
        ("/v1/fim/completions", {"prompt": ["a"], "max_tokens": -1}, 400, "max_tokens"),
        ("/v1/events", {"type": "view"}, 400, "completion_id"),
    ]
    for path, body, expected, mention in cases:
        status, text = await post(f"{bridge.url}{path}", body, AUTH)
        error = json.loads(text)["error"]
        assert (status, error["code"]) == (expected, expected), (path, text)
        assert mention in error["message"], (path, text)
    status, text = await post(f"{bridge.url}/infill", {"prompt": "x"}, {**AUTH, "X-Ctxpress-Language": "cobol"})
    assert status == 400 and "cobol" in text
    status, text = await post(f"{bridge.url}/infill", {"prompt": "x"}, {**AUTH, "X-Ctxpress-Repository": "r" * 300})
    assert status == 400 and "X-Ctxpress-Repository" in text
    # a document past the appliance's limit, inside the HTTP body limit: refused before it is sent
    huge = {"input_prefix": "x" * (appliance.settings.max_request_bytes - 32 * 1024), "n_predict": 4}
    status, text = await post(f"{bridge.url}/infill", huge, AUTH)
    assert status == 413 and "bytes" in json.loads(text)["error"]["message"]
    assert (await get(f"{bridge.url}/no/such/route", AUTH))[0] == 404
    assert (await get(f"{bridge.url}/infill", AUTH))[0] == 405
    assert (await get(f"{bridge.url}/health", AUTH)) == (200, '{"status":"ok"}')


async def test_a_client_that_goes_away_or_is_superseded_is_abandoned_in_the_appliance(
        appliance: Appliance, bridge: Bridge) -> None:
    before = await asyncio.to_thread(cancelled_in_worker, appliance)
    long_body = {**vscode_infill(), "input_prefix": LONG_PREFIX + "def last(value):\n", "input_suffix": "\n",
                 "prompt": "    return ", "n_predict": 64}
    headers = {**AUTH, "X-Ctxpress-Path": "pkg/long.py"}
    # llama.vim stops its curl for a newer request: the connection closes mid-request
    gone = asyncio.ensure_future(post(f"{bridge.url}/infill", long_body, headers))
    await asyncio.sleep(1.0)
    gone.cancel()
    # a newer request for the same document from the same client takes the pending one's place
    first = asyncio.ensure_future(post(f"{bridge.url}/infill", long_body, headers))
    await asyncio.sleep(1.0)
    # (the same document edited down to a short one, so that the newer request is answered quickly)
    second = asyncio.ensure_future(post(f"{bridge.url}/infill", vscode_infill(), headers))
    status, text = await first
    assert (status, json.loads(text)["content"]) == (200, "")
    status, text = await second
    assert status == 200 and json.loads(text)["content"].startswith("a + b"), text
    deadline = time.monotonic() + 30
    after = before
    while time.monotonic() < deadline and after < before + 2:
        await asyncio.sleep(0.5)
        after = await asyncio.to_thread(cancelled_in_worker, appliance)
    assert after >= before + 2


async def test_unreachable_appliance_is_a_503_at_once(appliance: Appliance) -> None:
    dead = {**appliance.env, "CTXPRESS_NATS_URL": f"nats://127.0.0.1:{free_port()}"}
    running = start_bridge(dead)
    try:
        for path, body in (("/infill", vscode_infill()), ("/v1/completions", tabby_segments()),
                           ("/v1/fim/completions", {"prompt": "x"})):
            status, text = await asyncio.wait_for(post(f"{running.url}{path}", body), 30)
            assert status == 503 and "unreachable" in json.loads(text)["error"]["message"], text
        assert (await get(f"{running.url}/health"))[0] == 503
        assert (await get(f"{running.url}/v1/health"))[0] == 503
    finally:
        stop_bridge(running)


def test_refuses_to_start_exposed_or_in_team_mode_without_a_token(appliance: Appliance) -> None:
    for extra, args, says in (({}, ("--host", "0.0.0.0"), "not loopback"),
                              ({"CTXPRESS_TEAM": "true"}, (), "team mode"),
                              ({"CTXPRESS_HTTP_TOKEN": "short"}, (), "at least 16")):
        done = subprocess.run([sys.executable, "-m", "ctxpress.cli", "serve-http", "--port", str(free_port()), *args],
                              env={**appliance.env, **extra}, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (extra, done.stderr)
