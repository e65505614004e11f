import json
import re
import urllib.request
from typing import Any

import pytest

pytestmark = pytest.mark.services


def inference_successes(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    match = re.search(r'^nv_inference_request_success\{model="ensemble",version="1"\} (\d+)', text, re.M)
    return int(match.group(1)) if match else 0


async def test_metrics_endpoint_counts_requests(appliance: Any, nats_client: Any) -> None:
    url = appliance.settings.metrics_url()
    before = inference_successes(url)
    request = {"repository": "m", "path": "m.py", "text": "import os\nx = os.", "line": 1, "column": 6,
               "max_tokens": 4}
    for _ in range(2):
        reply = await nats_client.request(appliance.settings.completion_subject, json.dumps(request).encode(),
                                          timeout=120)
        assert "error" not in json.loads(reply.data)
    assert inference_successes(url) == before + 2
