"""Tabby's agent 1.5.0 (from npm: the agent Tabby's VS Code, IntelliJ and Vim plugins run) against
``ctxpress serve-http`` and the real appliance: its Language Server asked for completions by a pygls
client playing the editor, and its JSON-lines protocol driven as vim-tabby drives it, whose ``view``
and ``select`` telemetry must land as feedback. How 1.5.0 is driven: tests/e2e/tabby_driver.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Appliance
from tests.ctxpress.http.test_serve_http import Bridge, start_bridge, stop_bridge
from tests.ctxpress.lsp.test_lsp_server import CURSOR, SOURCE, feedback_landed
from tests.e2e.conftest import git_repo, installed
from tests.e2e.replay import record, replay_case
from tests.e2e.tabby_driver import (
    AGENT_CLI,
    AGENT_VERSION,
    TabbyJsonLines,
    TabbyLspEditor,
    agent_environment,
    agent_log,
    lsp_replay,
    percentile_50,
)

pytestmark = pytest.mark.services

TOKEN = "tabby-e2e-token-0123456789"


@pytest.fixture(scope="module")
def tabby_bridge(appliance: Appliance) -> Iterator[Bridge]:
    # Tabby's agent sends no repository name without a git remote: the bridge's own default names it
    running = start_bridge({**appliance.env, "CTXPRESS_HTTP_TOKEN": TOKEN, "CTXPRESS_HTTP_REPOSITORY": "tabby-e2e"})
    yield running
    stop_bridge(running)


@pytest.fixture
def agent_cli() -> Path:
    return installed(AGENT_CLI)


def assert_nothing_left_the_machine(home: Path) -> None:
    """The agent's usage tracking stayed off: no usage event was sent or even attempted (its log would show
    the failed post to app.tabbyml.com on this machine without internet)."""
    log = agent_log(home, limit=10**9)
    assert "Initialized" in log, "the agent logged nothing: is the config file read?"
    assert "anonymous usage" not in log.lower() and "app.tabbyml.com" not in log, log[-3000:]


async def test_tabby_agent_language_server_completes_through_serve_http(
        appliance: Appliance, tabby_bridge: Bridge, agent_cli: Path, tmp_path: Path, latency_report: Path) -> None:
    repo = git_repo(tmp_path / "tabby-lsp-demo")
    path = repo / "pkg" / "math_utils.py"
    path.write_text(SOURCE)
    home = tmp_path / "home"
    env = agent_environment(home, tabby_bridge.url, TOKEN)
    editor = await TabbyLspEditor.start(agent_cli, home, env, repo)
    try:
        assert editor.server_info is not None and editor.server_info.version == AGENT_VERSION, editor.server_info
        assert editor.capabilities is not None and editor.capabilities.completion_provider is not None

        # The user opens the file with the body's line blank and types `return `, keystroke by keystroke.
        uri = path.as_uri()
        editor.open(uri, SOURCE.replace("    return \n", "    \n"))
        line, column = editor.type(uri, CURSOR[0], 4, "return ")
        assert (line, column) == CURSOR
        result = await editor.complete(uri, line, column)
        assert result.items, f"no suggestion from the agent; messages: {editor.messages}"
        item = result.items[0]
        assert item.text_edit is not None and isinstance(item.text_edit.new_text, str)
        suggestion = item.text_edit.new_text
        assert suggestion.startswith("a + b"), suggestion
        # an id the bridge gave (the agent makes up "agent-…" ids for answers it gives without the server)
        assert isinstance(item.data, dict) and not str(item.data["completionId"]).startswith("agent-"), item.data
        print(f"tabby-agent {AGENT_VERSION} LSP item: label={item.label!r} newText={suggestion!r}")

        # The latency replay: a function body of a third-party file typed back, a suggestion at each pause.
        replay = replay_case()
        replayed = repo / "pkg" / replay.source.name
        replayed.write_text(replay.opened)
        editor.open(replayed.as_uri(), replay.opened)
        latencies, texts = await lsp_replay(editor, replay, replayed.as_uri())
        assert len(latencies) == len(replay.pauses)
        record(latency_report, f"tabby-agent {AGENT_VERSION} LSP → serve-http", latencies)
        print(f"tabby-agent LSP replay: {[round(ms) for ms in latencies]} ms, p50 {percentile_50(latencies):.0f} ms; "
              f"suggestions {texts}")
        assert not [m for m in editor.messages if "disconnected" in m.message or "unauthorized" in m.message], \
            editor.messages
    except BaseException:
        print(agent_log(home))
        raise
    finally:
        await editor.stop()
    assert_nothing_left_the_machine(home)


async def test_tabby_agent_view_and_select_events_land_as_feedback(
        appliance: Appliance, tabby_bridge: Bridge, agent_cli: Path, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "tabby-vim-demo")
    path = repo / "pkg" / "math_utils.py"
    path.write_text(SOURCE)
    home = tmp_path / "home"
    agent = await TabbyJsonLines.start(agent_cli, home, agent_environment(home, tabby_bridge.url, TOKEN))
    try:
        assert await agent.initialize()
        assert await agent.status("ready") == "ready", agent.events

        # vim-tabby's Trigger on `    return |` (manually: its trigger key), then what it does with the answer:
        # renders the first choice and posts `view`; the user accepts it and it posts `select`.
        position = sum(len(line) + 1 for line in SOURCE.split("\n")[:CURSOR[0]]) + CURSOR[1]
        response = await agent.provide_completions(path, SOURCE, position)
        assert response.get("choices"), f"no completion from the agent: {response}; events {agent.events}"
        choice = response["choices"][0]
        assert choice["text"][position - choice["replaceRange"]["start"]:].startswith("a + b"), choice
        completion_id = str(response["id"])
        assert not completion_id.startswith("agent-"), "the agent answered on its own, without the server"
        # postEvent answers false when the server refused the event (the agent's log says why)
        assert await agent.post_event("view", completion_id, choice["index"]), "the view event was refused"
        assert await agent.post_event("select", completion_id, choice["index"]), "the select event was refused"

        rows = await feedback_landed(appliance, completion_id, {"shown", "accepted"})
        actions = {r.action: r.chars_kept for r in rows}
        assert set(actions) == {"shown", "accepted"}, rows
        assert actions["shown"] is None and (actions["accepted"] or 0) >= len("a + b"), rows
        print(f"tabby-agent JSON-lines: completion {completion_id} {choice['text']!r}; feedback {actions}")
    except BaseException:
        print(agent_log(home))
        raise
    finally:
        stderr = await agent.stop()
        if stderr.strip():
            print(f"tabby-agent stderr: {stderr[-2000:]}")
    assert_nothing_left_the_machine(home)
