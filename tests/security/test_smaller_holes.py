"""Issue 31, item 7: the smaller holes. A client-chosen Prometheus label without bound; the loopback HTTP
bridge answering web pages (DNS rebinding, cross-site POSTs); database error text in a client's reply; a LIKE
pattern that did not escape its escape character; a name pattern whose ``$`` let a trailing newline through."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import aiohttp
import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session

from ctxpress_core import identity
from ctxpress_core.errors import GrantsUnavailable
from ctxpress_core.wire.v1 import CompletionRequest, CompletionResponse, ContextReport, Timings
from db.coarse_files import coarse_files
from db.models import IndexedFile, Repository
from db.session import engine_for
from tests.conftest import Appliance
from tests.ctxpress.http.test_serve_http import Bridge, start_bridge, stop_bridge
from workers import metrics
from workers.completion.observe import Observer
from workers.grants import Grants

# --- the scenario label --------------------------------------------------------------------------------------


def _scenario_labels() -> set[str]:
    return {sample.labels["scenario"] for family in metrics.REQUEST_LATENCY.collect() for sample in family.samples
            if "scenario" in sample.labels}


def test_the_scenario_label_is_bounded() -> None:
    observer = Observer(None)
    response = CompletionResponse(id="r", completion="", finish_reason="stop", model="m", mode="optimized",
                                  language="python", content_hash="0" * 64, timings=Timings(total_ms=5.0),
                                  context=ContextReport(strategy="window", sources=[], file_tokens=1,
                                                        context_tokens=1))
    before = _scenario_labels()
    for i in range(200):  # a client that sends a fresh scenario with every request
        request = CompletionRequest(repository="r", path="a.py", text="x\n", line=0, column=0,
                                    scenario=f"s{uuid.uuid4().hex[:8]}-{i}")
        observer.completion(request, response)
    odd = CompletionRequest(repository="r", path="a.py", text="x\n", line=0, column=0, scenario='A{b="c"}')
    observer.completion(odd, response)
    added = _scenario_labels() - before
    # before the fix: 201 new label values (each a histogram of 17 buckets, kept for ever)
    assert len(added) <= metrics.MAX_CLIENT_SCENARIOS + 1, len(added)
    assert metrics.scenario_label('A{b="c"}') == "other" and metrics.scenario_label(None) == "ide"
    assert metrics.scenario_label("bench-typing") == "bench-typing"  # the project's own keep their label


# --- the HTTP bridge and web pages ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_bridge(appliance: Appliance) -> Iterator[Bridge]:
    """On loopback without a token: what a single user runs, and what a web page in their browser reaches."""
    running = start_bridge(appliance.env)
    yield running
    stop_bridge(running)


@pytest.mark.services
@pytest.mark.parametrize(("headers", "status"), [
    ({}, 200),  # Tabby's agent, llama.vscode, llama.vim, Continue's extension host: no Origin
    ({"Origin": "vscode-webview://1a2b3c"}, 200),  # a VS Code webview
    ({"Host": "localhost:{port}"}, 200),
    ({"Host": "rebound.evil.example:{port}"}, 403),  # DNS rebinding: the page reads the answers
    ({"Host": "127.0.0.1:1"}, 403),
    ({"Origin": "https://evil.example"}, 403),  # a cross-site POST needs no read
    ({"Origin": "null"}, 403),  # a sandboxed frame or a file:// page
    ({"Origin": "http://localhost:3000"}, 403),  # another local server's page is a web page too
])
async def test_the_bridge_refuses_what_only_a_web_page_sends(open_bridge: Bridge, headers: dict[str, str],
                                                            status: int) -> None:
    port = open_bridge.url.rsplit(":", 1)[1]
    sent = {k: v.format(port=port) for k, v in headers.items()}
    body = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n", "n_predict": 1}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{open_bridge.url}/infill", json=body, headers=sent,
                                timeout=aiohttp.ClientTimeout(total=120)) as reply:
            answer = await reply.text()
            # before the fix every one of them was served (200)
            assert reply.status == status, answer


# --- database errors stay in the log -------------------------------------------------------------------------


async def test_a_client_is_not_told_the_databases_error(caplog: pytest.LogCaptureFixture) -> None:
    grants = Grants("postgresql+psycopg://postgres:hunter2@127.0.0.1:1/postgres")
    with pytest.raises(GrantsUnavailable) as refused:
        await grants.authorize("erin", "alpha")
    # before: "… (psycopg.OperationalError) connection failed: connection to server at "127.0.0.1", port 1 …"
    assert "127.0.0.1" not in str(refused.value) and "psycopg" not in str(refused.value)
    assert "cannot be read" in str(refused.value)
    assert "127.0.0.1" in caplog.text  # the operator still gets the detail


# --- LIKE and the escape character ---------------------------------------------------------------------------


@pytest.mark.services
def test_a_folder_with_a_backslash_finds_its_own_files(appliance: Appliance) -> None:
    url = appliance.settings.effective_database_url()
    name = f"like-{uuid.uuid4().hex[:6]}"
    with Session(engine_for(url)) as session, session.begin():
        repo = Repository(name=name)
        session.add(repo)
        session.flush()
        for path in ("a\\b/one.py", "a\\b/two.py", "ab/other.py"):
            session.add(IndexedFile(repo_id=repo.id, path=path, chunk_count=1, content_hash="h"))
    try:
        with Session(engine_for(url)) as session:
            found = coarse_files(session, [name], path="a\\b/one.py", imports=[], module_keys=[])
        # before the fix "a\\b/%" meant "ab/%": the folder's own file was missed, the other folder's was found
        assert set(found.reasons) == {"a\\b/two.py"}, found.reasons
    finally:
        with Session(engine_for(url)) as session, session.begin():
            session.execute(delete(Repository).where(Repository.name == name))


# --- names: "$" and a trailing newline -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["alice\n", "alice\n\n", "ali ce", ""])
def test_a_user_name_with_a_trailing_newline_is_refused(name: str) -> None:
    # before: "alice\n" passed `^…$` (the NATS authorization block and the subjects use the name)
    with pytest.raises(ValueError):
        identity.validate_name(name)
    assert identity.subject_user(f"ctxpress.v1.u.{name}.complete") is None


def test_a_plain_user_name_is_accepted() -> None:
    assert identity.validate_name("alice-2") == "alice-2"
    assert identity.subject_user("ctxpress.v1.u.alice-2.complete") == "alice-2"
