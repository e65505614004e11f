"""Issue 31, item 1: text PostgreSQL cannot store (NUL) or that has no UTF-8 form (a lone surrogate) is refused
at the wire, and a row the database refuses anyway does not stop the telemetry (or index) batches of everyone
else. Over the real NATS and PostgreSQL of the session's appliance."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from ctxpress_core.errors import ErrorCode, RequestError
from ctxpress_core.wire.v1 import Feedback, FileSaved, IndexEvent
from db.session import engine_for
from workers import metrics
from workers.completion.request import parse_request
from workers.telemetry import TelemetryWriter

REQUEST = {"repository": "demo", "path": "a.py", "text": "x = 1\n", "line": 0, "column": 5}


@pytest.mark.parametrize("field", ["repository", "path", "scenario", "request_id"])
@pytest.mark.parametrize("bad", ["\x00", "a\ud800b"])
def test_a_request_with_unstorable_text_is_a_client_error(field: str, bad: str) -> None:
    # json.dumps writes both as \u escapes, which is how they arrive over the wire
    with pytest.raises(RequestError) as refused:
        parse_request(json.dumps({**REQUEST, field: bad}).encode(), 1 << 20)
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    assert refused.value.details and refused.value.details[0]["field"] == field
    if bad == "\x00":
        assert "NUL" in str(refused.value)


def test_the_file_text_of_a_completion_may_hold_nul_but_not_a_lone_surrogate() -> None:
    # the text goes to the engine, never to the database: a file with a NUL in it is still completed
    assert parse_request(json.dumps({**REQUEST, "text": "x = '\x00'\n"}).encode(), 1 << 20).text == "x = '\x00'\n"
    with pytest.raises(RequestError) as refused:
        parse_request(json.dumps({**REQUEST, "text": "x = '\udfff'\n"}).encode(), 1 << 20)
    # before the fix it was accepted, and failed later (encoding the prompt) as `internal`
    assert refused.value.code == ErrorCode.INVALID_REQUEST and "surrogate" in str(refused.value)


@pytest.mark.parametrize("payload", [
    '{"completion_id": "\\u0000", "action": "shown"}',
    '{"completion_id": "\\ud800", "action": "shown"}',
])
def test_feedback_with_unstorable_text_is_refused(payload: str) -> None:
    with pytest.raises(ValidationError):
        Feedback.model_validate_json(payload)


def test_index_messages_with_nul_are_refused() -> None:
    # their text is stored (chunks): the index worker terminates them as invalid instead of failing its batch
    with pytest.raises(ValidationError):
        FileSaved(repository="r", path="a.py", text="a\x00b")
    with pytest.raises(ValidationError):
        IndexEvent.model_validate({"repository": "r", "commit": "a" * 40, "hook": "post-commit",
                                   "changes": [{"path": "a\x00.py", "status": "A", "text": "x"}]})


def test_a_file_with_nul_in_a_commit_is_binary_not_the_whole_event_invalid() -> None:
    event = IndexEvent.model_validate({"repository": "r", "commit": "a" * 40, "hook": "post-commit", "changes": [
        {"path": "data.py", "status": "A", "text": "x = 1\n" * 2000 + "\x00"},  # past the hook's old 8 KiB look
        {"path": "ok.py", "status": "A", "text": "y = 2\n"}]})
    assert [(c.path, c.text, c.skipped) for c in event.changes] == [("data.py", None, "binary"),
                                                                    ("ok.py", "y = 2\n", None)]


def _feedback_rows(url: str, completion_id: str) -> list[Any]:
    with engine_for(url).connect() as conn:
        return list(conn.execute(text("SELECT action FROM completion_feedback WHERE completion_id = :id"),
                                 {"id": completion_id}))


async def _wait_rows(url: str, completion_id: str, timeout_s: float = 15) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    rows = _feedback_rows(url, completion_id)
    while not rows and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        rows = _feedback_rows(url, completion_id)
    return rows


@pytest.mark.services
async def test_nul_feedback_is_refused_and_telemetry_keeps_flowing(appliance: Any, nats_client: Any) -> None:
    """Before the fix: the NUL feedback was answered ok, then every telemetry batch of the worker failed
    (``PostgreSQL text fields cannot contain NUL``) and no row landed for anyone."""
    subject = appliance.settings.feedback_subject
    for bad in ('{"completion_id": "\\u0000", "action": "shown"}', '{"completion_id": "\\udc80", "action": "shown"}'):
        reply = json.loads((await nats_client.request(subject, bad.encode(), timeout=10)).data)
        assert reply.get("error", {}).get("code") == "invalid_request", reply
        assert "NUL" in reply["error"]["message"] or "surrogate" in reply["error"]["message"]
    request_id = f"after-nul-{uuid.uuid4().hex[:8]}"
    completed = json.loads((await nats_client.request(appliance.settings.completion_subject, json.dumps(
        {**REQUEST, "max_tokens": 2, "request_id": request_id}).encode(), timeout=120)).data)
    assert "error" not in completed, completed
    ok = await nats_client.request(subject, json.dumps({"completion_id": request_id, "action": "accepted",
                                                        "chars_kept": 1}).encode(), timeout=10)
    assert json.loads(ok.data) == {"ok": True}
    assert [r.action for r in await _wait_rows(appliance.settings.effective_database_url(), request_id)] == [
        "accepted"]


@pytest.mark.services
async def test_a_row_the_database_refuses_is_dropped_alone(appliance: Any) -> None:
    """The writer's own defence, for whatever the wire lets through: before the fix the batch holding the
    refused row was retried whole, forever, and the good row beside it never landed."""
    url = appliance.settings.effective_database_url()
    writer = TelemetryWriter(url, flush_interval_s=0.1)
    good = f"beside-nul-{uuid.uuid4().hex[:8]}"
    dropped_before = metrics.TELEMETRY_DROPPED._value.get()
    writer.start()
    try:
        writer.record_feedback({"completion_id": "bad\x00id", "action": "shown", "chars_kept": None})
        writer.record_feedback({"completion_id": good, "action": "shown", "chars_kept": None})
        assert [r.action for r in await _wait_rows(url, good, timeout_s=10)] == ["shown"]
    finally:
        await asyncio.wait_for(writer.close(), timeout=10)
    assert metrics.TELEMETRY_DROPPED._value.get() == dropped_before + 1
