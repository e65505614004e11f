"""The team topology of infra/ as processes (``ctxpress.topology``): a three-node NATS cluster with TLS and users,
PostgreSQL with a role per service, the gateway, two completion shards each with its own engine, the index worker.
Two developers with different grants complete through the gateway; a commit through a hooks user's git hooks
becomes searchable; a shard killed with SIGKILL hands its files to the other; a NATS node killed loses nothing."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from sqlalchemy import text

from ctxpress.topology import LocalTopology
from ctxpress_core import identity
from db.session import engine_for
from workers.sharding import shard_for

pytestmark = pytest.mark.services

REPO_A, REPO_B = "team-a", "team-b"
REQUEST_TIMEOUT_S = 120.0


def module_text(name: str, functions: int = 12) -> str:
    """A file long enough that its prompt is worth keeping on the engine's disk tier."""
    body = [f'"""{name}: arithmetic helpers."""', ""]
    for i in range(functions):
        body += [f"def {name}_step_{i}(value: int, factor: int = {i + 2}) -> int:",
                 f'    """Scale value by {i + 2} and shift it by {i}."""', f"    return value * factor + {i}", "", ""]
    body += ["def total(values: list[int]) -> int:", "    return "]
    return "\n".join(body) + "\n"


def request(repository: str, path: str, **extra: Any) -> bytes:
    source = module_text(Path(path).stem.replace("-", "_"))
    lines = source.splitlines()
    return json.dumps({"repository": repository, "path": path, "text": source, "line": len(lines) - 1,
                       "column": len(lines[-1]), "max_tokens": 8, **extra}).encode()


class Developer:
    def __init__(self, credentials: identity.NatsCredentials, client: nats.NATS) -> None:
        self.credentials = credentials
        self.client = client

    async def ask(self, kind: str, payload: bytes) -> dict[str, Any]:
        reply = await self.client.request(self.credentials.subject(kind), payload, timeout=REQUEST_TIMEOUT_S)
        return dict(json.loads(reply.data))

    async def complete(self, repository: str, path: str, **extra: Any) -> dict[str, Any]:
        return await self.ask("complete", request(repository, path, **extra))


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[LocalTopology]:
    with LocalTopology(tmp_path_factory.mktemp("topology"), model_path, report=lambda line: None) as running:
        yield running


@pytest.fixture(scope="module")
def users(topology: LocalTopology) -> dict[str, identity.NatsCredentials]:
    return {"alice": topology.add_user("alice", [REPO_A]), "bob": topology.add_user("bob", [REPO_B]),
            "ci": topology.add_user("ci", [REPO_A], kind="hooks")}


@pytest.fixture
async def alice(users: dict[str, identity.NatsCredentials]) -> AsyncIterator[Developer]:
    credentials = users["alice"]
    client = await nats.connect(credentials.nats_url.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.2,
                                **credentials.connect_options())
    yield Developer(credentials, client)
    await client.close()


@pytest.fixture
async def bob(users: dict[str, identity.NatsCredentials]) -> AsyncIterator[Developer]:
    credentials = users["bob"]
    client = await nats.connect(credentials.nats_url.split(","), **credentials.connect_options())
    yield Developer(credentials, client)
    await client.close()


def files_of(shard: int, count: int, repository: str = REPO_A) -> list[str]:
    found = [f"pkg/m{i}.py" for i in range(200) if shard_for(repository, f"pkg/m{i}.py", 2) == shard]
    return found[:count]


def admin_query(topology: LocalTopology, statement: str, **params: Any) -> list[Any]:
    url = (topology.home / "database" / "admin.url").read_text().strip()
    with engine_for(url).connect() as conn:
        return list(conn.execute(text(statement), params))


async def test_each_developer_completes_in_their_repositories_only(alice: Developer, bob: Developer) -> None:
    mine = await alice.complete(REPO_A, "pkg/m1.py")
    assert mine.get("completion") and mine["shard"] == shard_for(REPO_A, "pkg/m1.py", 2), mine
    theirs = await bob.complete(REPO_B, "lib/x.py")
    assert theirs.get("completion") and theirs["shard"] == shard_for(REPO_B, "lib/x.py", 2), theirs
    assert (await alice.complete(REPO_B, "lib/x.py"))["error"]["code"] == "forbidden"
    assert (await bob.complete(REPO_A, "pkg/m1.py"))["error"]["code"] == "forbidden"


async def test_every_request_of_a_file_lands_on_its_shard(alice: Developer) -> None:
    for shard in (0, 1):
        for path in files_of(shard, 2):
            answers = [await alice.complete(REPO_A, path) for _ in range(2)]
            assert [a["shard"] for a in answers] == [shard, shard], answers
            assert answers[1]["context"]["cached_tokens"] > 0  # the second found the first's prompt on its engine


async def test_feedback_and_cancel_follow_the_request(topology: LocalTopology, alice: Developer) -> None:
    served = await alice.complete(REPO_A, "pkg/m1.py", request_id="feedback-1")
    assert served["id"] == "feedback-1"
    assert await alice.ask("feedback", json.dumps({"completion_id": "feedback-1", "action": "accepted",
                                                   "chars_kept": 3}).encode()) == {"ok": True}
    deadline = time.monotonic() + 30
    while not admin_query(topology, "SELECT 1 FROM completion_feedback WHERE completion_id = 'feedback-1' "
                                    "AND user_name = 'alice'"):
        assert time.monotonic() < deadline, "the feedback was not recorded with its user"
        await asyncio.sleep(0.5)
    # a long request, cancelled while the engine works on it
    pending = asyncio.ensure_future(alice.complete(REPO_A, files_of(1, 3)[2], request_id="cancel-1", max_tokens=256,
                                                   timeout_ms=60_000))
    await asyncio.sleep(1.0)
    await alice.client.publish(alice.credentials.subject("cancel"), json.dumps({"request_id": "cancel-1"}).encode())
    answer = await asyncio.wait_for(pending, REQUEST_TIMEOUT_S)
    assert answer.get("error", {}).get("code") == "cancelled", answer


def test_a_commit_through_the_hooks_is_searchable(topology: LocalTopology, users: dict[str, Any],
                                                  tmp_path: Path) -> None:
    commit = hooked_repository(topology, tmp_path / "repo")
    commit("ledger.py", "def reconcile_ledger_entries(entries):\n    return sorted(entries)\n")
    assert wait_searchable(topology, "reconcile_ledger_entries", 60), "the committed function never became searchable"


def hooked_repository(topology: LocalTopology, repo: Path) -> Callable[[str, str], None]:
    """A git repository whose hooks publish as the hooks user ``ci`` (granted REPO_A); returns
    ``commit(file, text)``."""
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    env = {**topology.admin_env(), "CTXPRESS_NATS_CREDENTIALS": str(topology.root / "users" / "ci.json")}
    del env["CTXPRESS_DATABASE_URL_FILE"]  # a hooks user's machine has no database
    installed = topology.ctxpress("hooks", "install", str(repo), "--name", REPO_A, env=env)
    assert installed.returncode == 0, installed.stderr

    def commit(name: str, source: str) -> None:
        (repo / name).write_text(source)
        subprocess.run([*git, "add", name], check=True)
        done = subprocess.run([*git, "commit", "-q", "-m", name], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    return commit


def wait_searchable(topology: LocalTopology, symbol: str, within_s: float) -> bool:
    env = {**topology.admin_env(), "CTXPRESS_TRITON_URL": topology.engine_url("triton-0")}
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = topology.ctxpress("search", "--repo", REPO_A, "--json", symbol, env=env)
        if found.returncode == 0 and any(hit["symbol"] == symbol for hit in json.loads(found.stdout)["results"]):
            return True
        time.sleep(1.0)
    return False


async def test_a_shard_killed_hands_its_files_to_the_other(topology: LocalTopology, alice: Developer) -> None:
    moved, stayed = files_of(0, 1)[0], files_of(1, 1)[0]
    assert (await alice.complete(REPO_A, moved))["shard"] == 0
    # its engine first: the worker answers inference_unavailable, and the gateway asks shard 1 instead
    topology.processes["triton-0"].kill(signal.SIGKILL)
    answer = await alice.complete(REPO_A, moved)
    assert answer.get("shard") == 1 and answer.get("completion") is not None, answer
    # then its worker: nobody subscribed on shard 0, the gateway asks shard 1 at once
    topology.processes["completion-worker-0"].kill(signal.SIGKILL)
    answer = await alice.complete(REPO_A, moved)
    assert answer.get("shard") == 1 and answer.get("completion") is not None, answer
    assert (await alice.complete(REPO_A, stayed))["shard"] == 1
    # back up: its files return to it (rendezvous hashing; nothing for the gateway to forget)
    for name in ("triton-0", "completion-worker-0"):
        process = topology.processes[name]
        process.start()
        process.wait_ready(600)
    deadline = time.monotonic() + 60
    while (await alice.complete(REPO_A, moved)).get("shard") != 0:
        assert time.monotonic() < deadline, "the file did not return to its shard"
        await asyncio.sleep(1.0)


async def test_a_shard_stopped_and_started_again_finds_its_files_on_its_disk_tier(
        topology: LocalTopology, alice: Developer) -> None:
    path = files_of(1, 1)[0]
    await alice.complete(REPO_A, path)
    for name in ("completion-worker-1", "triton-1"):
        topology.processes[name].stop()  # SIGTERM: the engine writes its pool to its disk tier
    assert (await alice.complete(REPO_A, path))["shard"] == 0
    for name in ("triton-1", "completion-worker-1"):
        topology.processes[name].start()
        topology.processes[name].wait_ready(600)
    deadline = time.monotonic() + 60
    while (answer := await alice.complete(REPO_A, path)).get("shard") != 1:
        assert time.monotonic() < deadline, "the file did not return to its shard"
        await asyncio.sleep(1.0)
    assert answer["context"]["restored_tokens"] > 0, answer["context"]


async def test_a_nats_node_killed_loses_no_completion_and_no_commit(topology: LocalTopology, alice: Developer,
                                                                    tmp_path: Path) -> None:
    victim = topology.processes[topology.nodes[0].name]
    victim.kill(signal.SIGKILL)
    killed = time.monotonic()
    # NATS core is at most once: a request in flight through the dead node (or sent before the gateway's
    # subscription moved to a live one) gets no answer, and the editor asks again, as it does at its next keystroke
    lost = 0
    while True:
        try:
            first = await asyncio.wait_for(alice.complete(REPO_A, files_of(0, 1)[0]), 30)
            break
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
            lost += 1
            assert time.monotonic() - killed < 120, f"no answer within 120 s of the kill ({lost} tries)"
            await asyncio.sleep(0.5)
    print(f"\nNATS node killed: first answer {time.monotonic() - killed:.1f} s later, after {lost} unanswered tries")
    assert first.get("completion") is not None, first
    answers = [await alice.complete(REPO_A, path) for path in (*files_of(0, 2), *files_of(1, 2))]  # then every one
    assert all(a.get("completion") is not None for a in answers), answers
    commit = hooked_repository(topology, tmp_path / "repo")
    symbols = [f"settle_invoice_batch_{i}" for i in range(5)]
    for symbol in symbols:
        commit(f"{symbol}.py", f"def {symbol}(batch):\n    return len(batch)\n")
    victim.start()  # back, as a restarted container would be
    victim.wait_ready(60)
    missing = [s for s in symbols if not wait_searchable(topology, s, 60)]
    assert not missing, missing
