"""Every command that needs a part of the appliance, run as a user runs it (the real CLI, a process of its own) with
nothing up: one line on stderr naming the part, where it was asked and how to start it, exit status 3, no traceback.
The settings point at ports nothing listens on and a state directory of the test's own, so no running appliance is
found. The commands run all at once (those that ask NATS wait about 7 s for it: nats-py's connection attempts); each
test reads one command's answer. No services."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.errors import NoServersError

from ctxpress.topology import free_ports
from ctxpress.unavailable import EXIT_PART_DOWN, explain
from ctxpress_core.errors import PartUnavailable
from ctxpress_core.settings import Settings

SOURCE = "def add(a, b):\n    return a + b\n"


@dataclass(frozen=True)
class Command:
    name: str  # the test's id
    args: tuple[str, ...]  # {repo}, {file} and {cases} are filled in
    part: str  # the part its line names


# Every command of `ctxpress --help` that needs a part. The rest: up, down and demo start or stop the parts
# themselves; status reports them (run below); explain, build-engines, triton-repo, eval make-cases and deploy setup
# need none; lsp and serve-http are doors that run while the appliance is down and answer each request with its
# error; worker and gateway wait for NATS, as a container started before it must.
COMMANDS = [
    Command("complete", ("complete", "{file}", "--line", "1", "--column", "11"), "NATS"),
    Command("eval", ("eval", "--cases", "{cases}"), "NATS"),
    Command("bench", ("bench", "--requests", "1"), "NATS"),
    Command("stats", ("stats",), "PostgreSQL"),
    Command("search", ("search", "--repo", "r", "add"), "PostgreSQL"),
    Command("index", ("index", "{repo}"), "Triton"),  # the embedder is asked first
    Command("users", ("users", "list"), "PostgreSQL"),
    Command("deploy", ("deploy", "roles"), "PostgreSQL"),
    Command("console", ("console",), "PostgreSQL"),
]
# Run with the others: NATS is optional to `hooks install` (the index worker creates its stream when it starts), and
# `status` probes a worker whose process lives (NATS died under it) over NATS.
OTHERS = {"hooks": ("hooks", "install", "{repo}"), "status": ("status",)}


@dataclass
class Answer:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


Answers = tuple[dict[str, str], dict[str, Answer], Path]  # the environment, each command's answer, the repository


def nothing_up_env(home: Path) -> dict[str, str]:
    """The environment of a user whose appliance is not running: its ports free, its state directory empty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    names = ("NATS_PORT", "NATS_MONITOR_PORT", "POSTGRES_PORT", "TRITON_HTTP_PORT", "TRITON_GRPC_PORT",
             "TRITON_METRICS_PORT", "WORKER_METRICS_PORT", "CONSOLE_PORT", "HTTP_PORT")
    env.update({f"CTXPRESS_{name}": str(port) for name, port in zip(names, free_ports(len(names)), strict=True)})
    env["CTXPRESS_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Answers]:
    root = tmp_path_factory.mktemp("nothing-up")
    repo = root / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    (repo / "a.py").write_text(SOURCE)
    cases = root / "cases.jsonl"
    cases.write_text(f'{{"id": "1", "repo": "{repo}", "path": "a.py", "line": 1, "column": 11, '
                     f'"expected": "a + b"}}\n')
    fill = {"{repo}": str(repo), "{file}": str(repo / "a.py"), "{cases}": str(cases)}
    env = nothing_up_env(root / "home")
    worker = subprocess.Popen(["sleep", "300"])  # the completion worker's pid file names a live process
    (root / "home" / "run").mkdir(parents=True)
    (root / "home" / "run" / "completion-worker.pid").write_text(f"{worker.pid}\n")
    started = time.monotonic()
    running = {name: subprocess.Popen(
        [sys.executable, "-m", "ctxpress.cli", *(fill.get(arg, arg) for arg in args)], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root)
        for name, args in [*((c.name, c.args) for c in COMMANDS), *OTHERS.items()]}
    done: dict[str, Answer] = {}
    try:
        for name, process in running.items():
            stdout, stderr = process.communicate(timeout=120)
            done[name] = Answer(process.returncode, stdout, stderr, time.monotonic() - started)
    finally:
        for process in [*running.values(), worker]:
            if process.poll() is None:
                process.kill()
                process.wait()
    yield env, done, repo


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_a_command_says_in_one_line_which_part_is_down(
        answers: Answers, command: Command) -> None:
    env, done, _ = answers
    answer = done[command.name]
    assert "Traceback" not in answer.stderr, answer.stderr
    lines = [line for line in answer.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, answer.stderr
    port = {"NATS": env["CTXPRESS_NATS_PORT"], "PostgreSQL": env["CTXPRESS_POSTGRES_PORT"],
            "Triton": env["CTXPRESS_TRITON_GRPC_PORT"]}[command.part]
    assert lines[0].startswith(f"error: {command.part} at "), lines[0]
    assert f":{port} cannot be reached" in lines[0], lines[0]
    assert "start the appliance with `ctxpress up`" in lines[0], lines[0]
    assert answer.returncode == EXIT_PART_DOWN, answer


def test_index_says_its_index_is_unchanged(answers: Answers) -> None:
    assert answers[1]["index"].stderr.rstrip().endswith("; the index is unchanged")


def test_hooks_install_without_nats_installs_them_and_says_so_in_a_line(answers: Answers) -> None:
    """No traceback, no endless retry: the hooks are installed and one line says NATS was not there."""
    _, done, repo = answers
    answer = done["hooks"]
    assert answer.returncode == 0, answer.stderr
    assert "Traceback" not in answer.stderr, answer.stderr
    lines = [line for line in answer.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not reachable now" in lines[0], answer.stderr
    assert (repo / ".git" / "hooks" / "post-commit").exists()


def test_status_with_nats_gone_under_a_live_worker_reports_it_down(answers: Answers) -> None:
    """The worker's probe asks NATS once: nats-py retried a first connection forever, and status never returned."""
    answer = answers[1]["status"]
    assert answer.returncode == 3, answer.stdout + answer.stderr
    assert "Traceback" not in answer.stderr and "encountered error" not in answer.stderr, answer.stderr
    assert re.search(r"completion-worker +stopped +pid \d+", answer.stdout), answer.stdout


# --- the mapping itself, in-process -------------------------------------------------------------------------------


def test_a_part_down_inside_an_exception_group_is_found() -> None:
    group = ExceptionGroup("gathered", [ValueError("other"), NoServersError()])
    line = explain(group, Settings(nats_port=4999))
    assert line is not None and line.startswith("error: NATS at nats://127.0.0.1:4999 cannot be reached;")


def test_a_part_configured_elsewhere_names_its_setting_not_ctxpress_up() -> None:
    line = explain(PartUnavailable("PostgreSQL", "db.internal:5432"),
                   Settings(database_url="postgresql+psycopg://u:secret@db.internal:5432/x"))
    assert line is not None and "CTXPRESS_DATABASE_URL" in line and "ctxpress up" not in line
    assert "secret" not in line


def test_any_other_error_is_left_alone() -> None:
    assert explain(RuntimeError("a bug"), Settings()) is None
    try:
        try:
            raise NoServersError
        except NoServersError:
            raise KeyError("a bug in the handling")  # noqa: B904 (raised during the handling: what is tested)
    except KeyError as bug:
        assert explain(bug, Settings()) is None  # raised during, not from: its traceback is what helps
