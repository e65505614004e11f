"""One size limit for every subject the completion worker serves (the real appliance over NATS): a
file_opened or a feedback larger than a completion request may be is refused before it is parsed, and the
worker goes on answering."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxpress_core.wire.v1 import SUBJECT_FEEDBACK, SUBJECT_FILE_OPENED
from tests.conftest import Appliance

pytestmark = pytest.mark.services


def _large_source(size: int) -> str:
    line = "value = compute(value) + 1  # a line of ordinary code\n"
    return line * (size // len(line) + 1)


@pytest.mark.parametrize(("subject", "body"), [
    (SUBJECT_FILE_OPENED, lambda text: {"repository": "big", "path": "big.py", "text": text, "language": "python"}),
    (SUBJECT_FEEDBACK, lambda text: {"completion_id": text[:100], "action": "shown", "padding": text}),
])
async def test_a_message_over_the_limit_is_refused_on_every_subject(appliance: Appliance, nats_client: Any,
                                                                    subject: str, body: Any) -> None:
    limit = appliance.settings.max_request_bytes
    payload = json.dumps(body(_large_source(2 * limit))).encode()
    assert limit < len(payload) < 4 * limit  # within what NATS carries: the worker, not NATS, must refuse it
    reply = json.loads((await nats_client.request(subject, payload, timeout=30)).data)
    assert reply.get("error", {}).get("code") == "payload_too_large", reply
    small = {"repository": "big", "path": "small.py", "text": "x = 1\n", "language": "python"}
    answered = json.loads((await nats_client.request(SUBJECT_FILE_OPENED, json.dumps(small).encode(), timeout=30)).data)
    assert answered.get("ok") is True, answered
