"""Neovim (Debian's, 0.7.2) with its built-in LSP client attached to ``ctxpress lsp``, against the real
appliance: the user types in insert mode, asks with <C-x><C-o> (``vim.lsp.omnifunc``: a plain
``textDocument/completion``) and takes the item with <C-y>; the buffer must then hold exactly the
suggestion. The editor side is tests/e2e/neovim_lsp.lua, run in ``nvim --headless``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Appliance
from tests.ctxpress.lsp.test_lsp_server import CURSOR, SOURCE, feedback_landed
from tests.e2e.conftest import git_repo
from tests.e2e.replay import record, replay_case
from tests.e2e.tabby_driver import percentile_50

pytestmark = pytest.mark.services

SCRIPT = Path(__file__).with_name("neovim_lsp.lua")
OPENED = SOURCE.replace("    return \n", "    \n")  # the body's line blank: the user types `return `
RUN_LIMIT_S = 540  # the whole nvim run, cold prompts included; per answer: ANSWER_LIMIT_S
ANSWER_LIMIT_S = 180


def neovim() -> str:
    """The nvim on PATH (infra/editor-clients/neovim.sh installs Debian's); the test fails without it."""
    path = shutil.which("nvim")
    if path is None:
        pytest.fail("nvim is missing: install the editor clients with `make editor-clients`")
    return path


def run_neovim(appliance: Appliance, plan: dict[str, Any], work: Path) -> tuple[dict[str, Any], str]:
    """Runs the Lua script in a headless Neovim whose environment is the appliance's (``ctxpress lsp``,
    started by Neovim, inherits it); the script's results and Neovim's LSP log."""
    plan_file, result = work / "plan.json", work / "result.json"
    plan_file.write_text(json.dumps({**plan, "result": str(result)}))
    xdg = {name: str(work / name.lower()) for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                                                       "XDG_CACHE_HOME")}
    env = {**appliance.env, **xdg, "CTXPRESS_NVIM_PLAN": str(plan_file)}
    try:
        done = subprocess.run([neovim(), "--headless", "--clean", "-u", str(SCRIPT)], env=env, cwd=work,
                              capture_output=True, text=True, timeout=RUN_LIMIT_S + 30)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        output = f"nvim killed after {exc.timeout} s"
    logs = sorted(work.rglob("lsp.log"))
    log = (logs[0].read_text(errors="replace")[-6000:] if logs else "(no lsp.log)") + "\n" + output[-2000:]
    if not result.exists():
        pytest.fail(f"Neovim wrote no results:\n{log}")
    return json.loads(result.read_text()), log


async def test_neovim_omnifunc_completion_from_ctxpress_lsp(
        appliance: Appliance, tmp_path: Path, latency_report: Path) -> None:
    repo = git_repo(tmp_path / "nvim-demo")
    main = repo / "pkg" / "math_utils.py"
    main.write_text(OPENED)
    replay = replay_case()
    replayed = repo / "pkg" / replay.source.name
    replayed.write_text(replay.opened)
    replay_line, replay_column = replay.cursor_at(0)
    plan = {
        "cmd": [sys.executable, "-m", "ctxpress.cli", "lsp"],
        "root": str(repo),
        "init_options": {},
        "keystroke_ms": 30,
        "answer_ms": ANSWER_LIMIT_S * 1000,
        "limit_ms": RUN_LIMIT_S * 1000,
        "main": {"file": str(main), "line": CURSOR[0], "column": 4, "typed": "return "},
        "replay": {"file": str(replayed), "line": replay_line, "column": replay_column,
                   "chunks": replay.typed_between()},
    }
    started = time.perf_counter()
    results, log = run_neovim(appliance, plan, tmp_path)
    elapsed = time.perf_counter() - started
    try:
        assert results["errors"] == [], results["errors"]
        version = results["nvim"]
        print(f"Neovim {version['major']}.{version['minor']}.{version['patch']}, run {elapsed:.1f} s; "
              f"server {results['server']}")
        # Neovim's client asks only servers that say they complete
        assert results["server"]["completion"] and results["server"]["supports_completion"], results["server"]
        if results["has_inline_completion"]:
            pytest.fail("this Neovim has vim.lsp.inline_completion (0.12+): add its inline-completion path here")
        print("vim.lsp.inline_completion: absent in this Neovim (it came with 0.12): inline completion not tested")

        answer = results["main"]
        print(f"completion items (exact): {[item['newText'] for item in answer['items']]!r} in {answer['ms']:.0f} ms; "
              f"menu {answer['menu']!r}")
        assert answer["items"], answer
        suggestion = answer["items"][0]["newText"]
        assert suggestion.startswith("a + b"), suggestion
        assert answer["menu"] and answer["menu"][0] == suggestion and answer["menu_visible"], answer
        assert answer["line_before"] == "    return ", answer  # completeopt noinsert: nothing until <C-y>
        # After <C-y>: the suggestion in the buffer and nothing else. A newline in the item's text would
        # show as a NUL in the line, trailing whitespace or blank lines as such.
        assert "\n".join(answer["lines"]) + "\n" == SOURCE.replace("    return \n", f"    return {suggestion}\n"), \
            answer["lines"]
        assert answer["lines"][CURSOR[0]] == "    return a + b", answer["lines"]

        # The server reports the suggestion shown; Neovim 0.7's omnifunc never runs an item's command, so
        # the acceptance (the item's `ctxpress.accept`) is not reported from this editor.
        completion_id = answer["items"][0]["arguments"][0]
        rows = await feedback_landed(appliance, completion_id, {"shown"})
        assert [r.action for r in rows] == ["shown"], rows

        pauses = results["replay"]
        assert len(pauses) == len(replay.pauses), pauses
        # Each pause's suggestion reaches the menu, wherever the cursor is (after a word too)
        for pause in pauses:
            assert pause["menu"] == [item["newText"] for item in pause["items"]], pause
        latencies = [p["ms"] for p in pauses]
        record(latency_report, "Neovim 0.7 omnifunc → ctxpress lsp", latencies)
        print(f"Neovim replay: {[round(ms) for ms in latencies]} ms, p50 {percentile_50(latencies):.0f} ms; "
              f"items {[[i['newText'] for i in p['items']] for p in pauses]!r}; "
              f"menus {[p['menu'] for p in pauses]!r}")
        # Vim's complete() would insert an item's newlines as NULs: Neovim's own client gets one line per item
        accepted = results.get("replay_accepted")
        print(f"Neovim replay, the last suggestion taken with <C-y>: {accepted!r}")
        assert not any("\x00" in line for line in accepted or []), accepted
        assert all("\n" not in item["newText"] for pause in pauses for item in pause["items"]), pauses
    except BaseException:
        print(log)
        raise
