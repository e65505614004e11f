"""Team mode end to end: a real appliance started by `ctxpress up` with CTXPRESS_TEAM=true (NATS with the
generated users and TLS, PostgreSQL with its password, Triton and the model, the workers), developers added with
`ctxpress users`, two repositories indexed with `ctxpress index`. Each developer reaches only what they were
granted; what reaches the prompt is read from the reply's context report and from the telemetry rows.

The pure logic of the grant cache and the file store keys is tested beside it (the cache against the same real
PostgreSQL)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import nats
import psycopg
import pytest
from sqlalchemy import text

from ctxpress.parts import parts
from ctxpress.parts.postgres import PostgresPart
from ctxpress.parts.workers import CompletionWorkerPart
from ctxpress_core import identity
from ctxpress_core.errors import Forbidden, GrantsUnavailable
from ctxpress_core.settings import Settings
from ctxpress_core.tls import client_context
from ctxpress_core.wire.v1 import SUBJECT_FILE_SAVED, SUBJECT_INDEX_GIT, content_hash
from db import team as store
from db.session import engine_for
from indexer.stream import ensure_stream, stream_config
from tests.conftest import Appliance
from tests.indexer.index_repo import git, make_repo
from tests.team_services import plain_text_login, running_nats, team_appliance, team_settings
from workers.grants import GRANTS_TTL_S, Caller, Grants

pytestmark = pytest.mark.services

CODE = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
# Beta's code: what must never reach a prompt of a user without a grant for beta.
BETA_FILES = {
    "billing/__init__.py": "",
    "billing/ledger.py": '''"""Beta's ledger: order totals with the beta surcharge."""

BETA_SURCHARGE = 7


def order_total(lines: list[int]) -> int:
    """Sum of the order lines plus the beta surcharge."""
    return sum(lines) + BETA_SURCHARGE
''',
}
# A file that calls into beta's ledger: retrieval looks for `order_total` in the repositories in scope.
INVOICE = '''from billing.ledger import order_total


def invoice(lines: list[int]) -> str:
    total = order_total(lines)
    return f"{total}"
'''


@dataclass
class Team:
    appliance: Appliance
    alice: identity.NatsCredentials  # granted alpha
    bob: identity.NatsCredentials  # granted alpha and beta
    alice_file: Path

    @property
    def settings(self) -> Settings:
        return self.appliance.settings


def _users(appliance: Appliance, *args: str) -> subprocess.CompletedProcess[str]:
    done = appliance.ctxpress("users", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def team_up(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("team")
    with team_appliance(root / "home", model_path) as appliance:
        alpha = make_repo(root / "alpha")
        beta = root / "beta"
        beta.mkdir()
        git(beta, "init", "-q", "-b", "main")
        for rel, content in BETA_FILES.items():
            (beta / rel).parent.mkdir(parents=True, exist_ok=True)
            (beta / rel).write_text(content)
        git(beta, "add", "-A")
        git(beta, "commit", "-q", "-m", "beta")
        for name, path in (("alpha", alpha), ("beta", beta)):
            indexed = appliance.ctxpress("index", str(path), "--name", name, "--json")
            assert indexed.returncode == 0, indexed.stderr
        _users(appliance, "add", "alice", "--repos", "alpha", "--out", str(root / "alice.json"))
        _users(appliance, "add", "bob", "--repos", "alpha,beta", "--out", str(root / "bob.json"))
        yield Team(appliance, identity.load_credentials(root / "alice.json"),
                   identity.load_credentials(root / "bob.json"), root / "alice.json")


async def ask(credentials: identity.NatsCredentials, kind: str, body: dict[str, Any],
              wait_s: float = 120) -> dict[str, Any]:
    nc = await nats.connect(credentials.nats_url, connect_timeout=5, **credentials.connect_options())
    try:
        reply = await nc.request(credentials.subject(kind), json.dumps(body).encode(), timeout=wait_s)
        return dict(json.loads(reply.data))
    finally:
        await nc.close()


def request(repository: str, **over: Any) -> dict[str, Any]:
    return {"repository": repository, "path": "calc.py", "text": CODE, "line": 1, "column": len("    return a + "),
            "max_tokens": 4, **over}


def invoice_request(repository: str) -> dict[str, Any]:
    return {"repository": repository, "path": "billing/invoice.py", "text": INVOICE, "line": 5, "column": 0,
            "max_tokens": 4, "mode": "optimized"}


def retrieved(reply: dict[str, Any]) -> list[str]:
    assert "error" not in reply, reply
    return [b["name"] for b in reply["context"]["blocks"] if b["kind"] == "retrieved"]


def _rows(settings: Settings, query: str, **params: Any) -> list[Any]:
    with engine_for(settings.effective_database_url()).connect() as conn:
        return list(conn.execute(text(query), params).all())


# --- what each developer reaches ----------------------------------------------------------------------------


async def test_a_granted_repository_is_served_over_tls(team_up: Team) -> None:
    assert team_up.alice.nats_url.startswith("tls://") and team_up.alice.ca is not None
    reply = await ask(team_up.alice, "complete", request("alpha"))
    assert "error" not in reply, reply
    assert reply["finish_reason"] in ("stop", "length") and reply["mode"] == "optimized"


async def test_retrieval_reads_only_the_repositories_granted(team_up: Team) -> None:
    # bob holds beta: the same request finds beta's ledger, so the chunk is there to be found.
    assert any(name.startswith("billing/ledger.py:") for name in
               retrieved(await ask(team_up.bob, "complete", invoice_request("beta"))))
    # alice asks in alpha, her grant: retrieval is scoped to alpha and nothing of beta enters her prompt.
    names = retrieved(await ask(team_up.alice, "complete", invoice_request("alpha")))
    assert not any(name.startswith("billing/") for name in names), names


async def test_a_repository_without_grant_is_forbidden_and_reaches_nothing(team_up: Team) -> None:
    reply = await ask(team_up.alice, "complete", {**invoice_request("beta"), "request_id": "alice-beta-1"})
    assert reply["error"]["code"] == "forbidden", reply
    assert "beta" in reply["error"]["message"] and "context" not in reply
    opened = await ask(team_up.alice, "file_opened", {"repository": "beta", "path": "billing/invoice.py",
                                                      "text": INVOICE})
    assert opened["error"]["code"] == "forbidden"
    deadline = time.monotonic() + 30
    while not (rows := _rows(team_up.settings, "SELECT user_name, error_code, sources, prompt_tokens FROM "
                             "completion_events WHERE request_id = 'alice-beta-1'")):
        assert time.monotonic() < deadline, "no telemetry row for the refused request"
        await asyncio.sleep(0.2)
    assert [tuple(r) for r in rows] == [("alice", "forbidden", [], None)]  # nothing assembled, nothing prompted


async def test_revoke_takes_effect_without_restarting_the_worker(team_up: Team) -> None:
    worker_pid = CompletionWorkerPart(team_up.settings).pid()
    assert worker_pid is not None
    assert "error" not in await ask(team_up.bob, "complete", request("beta"))
    _users(team_up.appliance, "revoke", "bob", "--repos", "beta")
    deadline = time.monotonic() + 60  # the grants are cached for GRANTS_TTL_S; a loaded machine answers slowly
    while "error" not in (reply := await ask(team_up.bob, "complete", request("beta"))):
        assert time.monotonic() < deadline, "the revoke was never seen"
        await asyncio.sleep(0.2)
    assert reply["error"]["code"] == "forbidden"
    assert CompletionWorkerPart(team_up.settings).pid() == worker_pid  # the same worker process
    assert "error" not in await ask(team_up.bob, "complete", request("alpha"))  # the other grant stays
    _users(team_up.appliance, "grant", "bob", "--repos", "beta")


async def test_a_user_cannot_publish_on_another_users_subject(team_up: Team) -> None:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    alice, bob = team_up.alice, team_up.bob
    nc = await nats.connect(alice.nats_url, connect_timeout=5, allow_reconnect=False, max_reconnect_attempts=0,
                            error_cb=on_error, **alice.connect_options())
    try:
        with pytest.raises(nats.errors.TimeoutError):  # the server drops it: no worker ever hears it
            await nc.request(bob.subject("complete"), json.dumps(request("beta")).encode(), timeout=3)
        assert any(f'permissions violation for publish to "{bob.subject("complete")}"' in e.lower() for e in errors)
    finally:
        await nc.close()


async def test_an_unauthenticated_client_gets_nothing(team_up: Team) -> None:
    settings, alice = team_up.settings, team_up.alice
    assert alice.ca is not None
    tls = client_context(alice.ca)
    for login in ({}, {"user": "alice", "password": "not-hers"}, {"user": "nobody", "password": "x"}):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(settings.effective_nats_url(), connect_timeout=5, allow_reconnect=False,
                               max_reconnect_attempts=0, tls=tls, **login)
    # The right password in clear text: the server wants a TLS handshake and hangs up.
    info, answer = plain_text_login(settings.effective_nats_url(), alice.user, alice.password)
    assert info["tls_required"] is True and info["auth_required"] is True
    assert answer == b"" or answer.startswith(b"connection closed"), answer
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not trust the appliance's CA
        await nats.connect(settings.effective_nats_url(), connect_timeout=5, allow_reconnect=False,
                           max_reconnect_attempts=0, user=alice.user, password=alice.password)


def _complete_cli(credentials: Path, file: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    return subprocess.run([sys.executable, "-m", "ctxpress.cli", "complete", str(file), "--line", "1", "--column",
                           "15", "--max-tokens", "4", "--json"],
                          env={**env, "CTXPRESS_NATS_CREDENTIALS": str(credentials)},
                          capture_output=True, text=True, timeout=300, check=False)


async def test_ctxpress_complete_asks_as_the_user_of_its_credentials_file(team_up: Team, tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    for repository, expected in (("alpha", None), ("beta", "forbidden")):  # a folder outside git: its name
        (tmp_path / repository).mkdir()
        (tmp_path / repository / "calc.py").write_text(CODE)
        done = await loop.run_in_executor(None, _complete_cli, team_up.alice_file, tmp_path / repository / "calc.py")
        reply = json.loads(done.stdout)
        assert (reply.get("error") or {}).get("code") == expected, (done.stdout, done.stderr)


async def test_a_content_hash_one_user_sent_is_unknown_to_another(team_up: Team) -> None:
    private = CODE + "\nALICE_ONLY = 42\n"
    first = await ask(team_up.alice, "complete", request("alpha", text=private))
    assert "error" not in first, first
    by_hash = request("alpha", content_hash=content_hash(private))
    del by_hash["text"]
    assert "error" not in await ask(team_up.alice, "complete", by_hash)
    reply = await ask(team_up.bob, "complete", by_hash)  # bob holds the grant for alpha too
    assert reply["error"]["code"] == "unknown_content", reply


async def test_telemetry_rows_name_the_user_and_hold_no_source_text(team_up: Team) -> None:
    marker = "TELEMETRY_NEVER_STORES_THIS_LINE"
    body = request("alpha", request_id="telemetry-1", text=f"{CODE}{marker} = 1\n")
    reply = await ask(team_up.alice, "complete", body)
    assert "error" not in reply
    assert (await ask(team_up.alice, "feedback", {"completion_id": reply["id"], "action": "accepted"})) == {"ok": True}
    deadline = time.monotonic() + 30
    while True:
        events = _rows(team_up.settings, "SELECT user_name FROM completion_events WHERE request_id = 'telemetry-1'")
        feedback = _rows(team_up.settings, "SELECT user_name FROM completion_feedback WHERE completion_id = :id",
                         id=reply["id"])
        if events and feedback:
            break
        assert time.monotonic() < deadline, (events, feedback)
        await asyncio.sleep(0.2)
    assert [r[0] for r in events] == ["alice"] and [r[0] for r in feedback] == ["alice"]
    for table in ("completion_events", "completion_feedback"):
        (count,) = _rows(team_up.settings, f"SELECT count(*) FROM {table} t WHERE t::text LIKE :m",
                         m=f"%{marker}%")[0]
        assert count == 0, table


async def test_an_editor_save_is_indexed_only_in_a_granted_repository(team_up: Team) -> None:
    nc = await nats.connect(team_up.alice.nats_url, connect_timeout=5, **team_up.alice.connect_options())
    try:
        for repository, path in (("beta", "stolen.py"), ("alpha", "mine.py")):
            saved = {"repository": repository, "path": path, "text": CODE}
            ack = await nc.jetstream().publish(team_up.alice.subject("file_saved"), json.dumps(saved).encode())
            assert ack.seq > 0  # JetStream took both: the index worker decides
    finally:
        await nc.close()
    query = ("SELECT r.name, f.path FROM indexed_files f JOIN repositories r ON r.id = f.repo_id "
             "WHERE f.path IN ('stolen.py', 'mine.py')")
    deadline = time.monotonic() + 60
    while ("alpha", "mine.py") not in (rows := [tuple(r) for r in _rows(team_up.settings, query)]):
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.2)
    assert rows == [("alpha", "mine.py")]  # the save into beta, which alice lacks, was dropped


# Alice's saved, uncommitted draft in alpha, and a file calling it: what retrieval finds for the cursor.
DRAFT = '''"""Discounts being drafted."""


def draft_discount_for_vip(total: int) -> int:
    """Alice's draft, not committed: 13 off."""
    return total - 13
'''
CHECKOUT = '''from shop.drafts import draft_discount_for_vip


def checkout(total: int) -> int:
    price = draft_discount_for_vip(total)
    return price
'''


async def test_a_users_saves_shape_only_their_own_prompts(team_up: Team) -> None:
    """Bob holds alpha too: alice's save into alpha may shape her prompts, never his (before, a save went into
    the shared index, so anyone granted a repository could put text into colleagues' prompts)."""
    saved = {"repository": "alpha", "path": "shop/drafts.py", "text": DRAFT}
    nc = await nats.connect(team_up.alice.nats_url, connect_timeout=5, **team_up.alice.connect_options())
    try:
        ack = await nc.jetstream().publish(team_up.alice.subject("file_saved"), json.dumps(saved).encode())
        assert ack.seq > 0
    finally:
        await nc.close()
    checkout = {"repository": "alpha", "path": "shop/checkout.py", "text": CHECKOUT, "line": 5, "column": 0,
                "max_tokens": 4, "mode": "optimized"}
    deadline = time.monotonic() + 60
    while True:
        names = retrieved(await ask(team_up.alice, "complete", checkout))
        if any(n.startswith("shop/drafts.py:") for n in names):
            break
        assert time.monotonic() < deadline, f"alice's own save never reached her retrieval: {names}"
        await asyncio.sleep(0.5)
    names = retrieved(await ask(team_up.bob, "complete", checkout))
    assert not any(n.startswith("shop/drafts.py:") for n in names), names
    rows = _rows(team_up.settings, "SELECT f.owner, count(c.id) FROM indexed_files f LEFT JOIN code_chunks c ON "
                 "c.repo_id = f.repo_id AND c.path = f.path AND c.owner = f.owner WHERE f.path = 'shop/drafts.py' "
                 "GROUP BY f.owner")
    assert [r[0] for r in rows] == ["alice"] and rows[0][1] > 0, rows  # nothing of it in the shared index


async def test_a_developers_git_hooks_index_only_the_granted_repository(team_up: Team, tmp_path: Path) -> None:
    """Hooks installed with a developer's own credentials publish on that developer's subject, so a commit
    reaches the index only in a repository the developer holds a grant for (no shared hooks credential)."""
    await _hooks_index_only_alpha(team_up, team_up.alice_file, tmp_path, "alice")


async def test_a_hooks_users_commits_reach_only_its_repositories(team_up: Team, tmp_path: Path) -> None:
    """A CI runner's hooks: `ctxpress users hooks` scopes them to the repositories given (the unscoped hooks
    credential of before let a commit into any repository's index)."""
    _users(team_up.appliance, "hooks", "ci-alpha", "--repos", "alpha", "--out", str(tmp_path / "ci.json"))
    await _hooks_index_only_alpha(team_up, tmp_path / "ci.json", tmp_path, "ci")


async def _hooks_index_only_alpha(team_up: Team, credentials: Path, tmp_path: Path, who: str) -> None:
    """Commits into beta and alpha with hooks installed with ``credentials`` (granted alpha only)."""
    env = {**team_up.appliance.env, "CTXPRESS_NATS_CREDENTIALS": str(credentials)}

    def commit_with_hooks(name: str) -> None:
        root = make_repo(tmp_path / name, {"hooked/__init__.py": "", f"hooked/{who}_{name}_hook.py": CODE})
        installed = subprocess.run([sys.executable, "-m", "ctxpress.cli", "hooks", "install", str(root),
                                    "--name", name], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert installed.returncode == 0, installed.stderr
        (root / "hooked" / f"{who}_{name}_commit.py").write_text(CODE)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "hooked")  # the post-commit hook publishes as that user

    for name in ("beta", "alpha"):
        await asyncio.to_thread(commit_with_hooks, name)
    query = ("SELECT r.name, f.path FROM indexed_files f JOIN repositories r ON r.id = f.repo_id "
             f"WHERE f.path LIKE 'hooked/{who}_%_commit.py'")
    landed = ("alpha", f"hooked/{who}_alpha_commit.py")
    deadline = time.monotonic() + 60
    while landed not in (rows := [tuple(r) for r in _rows(team_up.settings, query)]):
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.2)
    await asyncio.sleep(2)  # beta's event was published first: it had its chance to land
    rows = [tuple(r) for r in _rows(team_up.settings, query)]
    assert rows == [landed]  # the commit into beta, which the user lacks, was dropped


async def test_the_http_bridge_asks_as_its_user_and_gets_only_the_granted_repository(team_up: Team) -> None:
    """`ctxpress serve-http` on a developer's machine, with her credentials file and a token: llama.vscode's
    /infill served in her repository, 403 in one she lacks (the worker's answer, from her subject)."""
    import aiohttp

    from tests.ctxpress.http.test_serve_http import start_bridge, stop_bridge, vscode_infill

    token = "team-bridge-token-0123456789"
    env = {**team_up.appliance.env, "CTXPRESS_NATS_CREDENTIALS": str(team_up.alice_file),
           "CTXPRESS_HTTP_TOKEN": token}
    bridge = await asyncio.to_thread(start_bridge, env)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            answers = {}
            for repository in ("alpha", "beta"):
                headers = {"Authorization": f"Bearer {token}", "X-Ctxpress-Repository": repository,
                           "X-Ctxpress-Path": "pkg/math_utils.py"}
                async with session.post(f"{bridge.url}/infill", json=vscode_infill(), headers=headers) as response:
                    answers[repository] = (response.status, await response.json())
    finally:
        await asyncio.to_thread(stop_bridge, bridge)
    assert answers["alpha"][0] == 200 and isinstance(answers["alpha"][1].get("content"), str), answers["alpha"]
    assert answers["beta"][0] == 403, answers["beta"]
    assert "forbidden" in json.dumps(answers["beta"][1]), answers["beta"]


async def test_the_probes_of_up_and_the_supervisor_log_in_as_the_worker(team_up: Team) -> None:
    loop = asyncio.get_running_loop()
    part = CompletionWorkerPart(team_up.settings)
    assert await loop.run_in_executor(None, part.ready)
    assert await loop.run_in_executor(None, part.answers)


# --- what the appliance exposes -----------------------------------------------------------------------------


def test_postgresql_refuses_a_connection_without_its_password(team_up: Team) -> None:
    s = team_up.settings
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(host=s.bind_host, port=s.postgres_port, user="postgres", dbname="postgres",
                        connect_timeout=10).close()
    with engine_for(s.effective_database_url()).connect() as conn:  # the URL built from the stored password
        assert conn.execute(text("SELECT 1")).scalar() == 1
    assert "***" in PostgresPart(s).address()  # `ctxpress status` never prints it


def _listening() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket of this machine (/proc/net/tcp, tcp6)."""
    found: dict[int, tuple[str, int]] = {}
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            raw, port = fields[1].split(":")
            packed = bytes.fromhex(raw)
            # /proc prints each 32-bit word of the address in host (little-endian) order
            address = b"".join(packed[i:i + 4][::-1] for i in range(0, width, 4))
            ip = ipaddress.ip_address(address)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
            found[int(fields[9])] = (str(ip), int(port, 16))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass
    return inodes


def _appliance_pids(settings: Settings) -> set[int]:
    """Every process of the appliance: each part leads its own session; PostgreSQL's are its postmaster's
    children."""
    leaders = {pid for part in parts(settings) if (pid := part.pid()) is not None}
    postmaster = PostgresPart(settings).pid()
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, ppid, session = int(entry.name), int(fields[1]), int(fields[3])
        if session in leaders or pid in leaders or postmaster in (pid, ppid):
            pids.add(pid)
    return pids


def test_only_nats_listens_beyond_loopback(team_up: Team) -> None:
    s = team_up.settings
    listening = _listening()
    sockets = {listening[i] for pid in _appliance_pids(s) for i in _socket_inodes(pid) if i in listening}
    # Every endpoint is found, so a listener that moved would be seen.
    expected = {s.nats_port, s.nats_monitor_port, s.postgres_port, s.triton_http_port, s.triton_grpc_port,
                s.triton_metrics_port, s.worker_metrics_port}
    assert expected <= {port for _, port in sockets}, (sorted(sockets), expected)
    # The one door, behind TLS and passwords (0.0.0.0, or :: taking IPv4 too).
    assert {a for a, p in sockets if p == s.nats_port} <= {"0.0.0.0", "::"}
    exposed = sorted((a, p) for a, p in sockets if p != s.nats_port and not ipaddress.ip_address(a).is_loopback)
    assert exposed == []


# --- the grant check's own logic ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_grants_are_cached_for_at_most_the_ttl(team_up: Team) -> None:
    url = team_up.settings.effective_database_url()
    store.add_user(url, "erin", "$2a$04$unused", ["alpha"])
    clock = Clock()
    grants = Grants(url, clock=clock)
    assert GRANTS_TTL_S <= 2.0
    erin = await grants.authorize("erin", "alpha")
    assert (erin.user, erin.repositories) == ("erin", ("alpha",)) and str(erin.kv_owner).startswith("erin@")
    with pytest.raises(Forbidden, match="no grant for repository 'beta'"):
        await grants.authorize("erin", "beta")
    store.revoke(url, "erin", ["alpha"])
    clock.now += GRANTS_TTL_S / 2
    assert (await grants.authorize("erin", "alpha")).repositories == ("alpha",)  # still the cached grants
    clock.now += GRANTS_TTL_S / 2
    with pytest.raises(Forbidden):
        await grants.authorize("erin", "alpha")  # read again: the revoke is seen
    with pytest.raises(Forbidden, match=r"ctxpress\.v1\.u\.<user>"):
        await grants.authorize(None, "alpha")  # team mode: no user, no service
    with pytest.raises(Forbidden):
        await grants.authorize("nobody", "alpha")


async def test_a_database_that_cannot_be_read_refuses_the_request() -> None:
    grants = Grants("postgresql+psycopg://postgres@127.0.0.1:1/postgres")
    with pytest.raises(GrantsUnavailable):
        await grants.authorize("erin", "alpha")


def test_file_store_keys_are_per_user() -> None:
    digest = content_hash(CODE)
    assert Caller(None, ("alpha",)).file_key(digest) == digest  # the single-user appliance, as before
    assert Caller("alice", ("alpha",)).file_key(digest) != Caller("bob", ("alpha",)).file_key(digest)


@pytest.mark.parametrize("module", ["workers.completion", "workers.index_worker"])
def test_workers_refuse_team_mode_without_credentials(module: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    env.update(CTXPRESS_HOME=str(tmp_path), CTXPRESS_NATS_URL="nats://nats.team.internal:4222")
    done = subprocess.run([sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert "refusing to start" in done.stderr and "CTXPRESS_NATS_CREDENTIALS is not set" in done.stderr
    assert "Traceback" not in done.stderr


# --- a single-user NATS -------------------------------------------------------------------------------------


@pytest.fixture
def single_user(tmp_path: Path) -> Iterator[Settings]:
    settings = team_settings(tmp_path, "postgresql+psycopg://unused@127.0.0.1:1/postgres", team=False)
    assert not identity.team_mode(settings) and not identity.tls_on(settings)
    with running_nats(settings):
        yield settings


@pytest.fixture
async def single_user_nats(single_user: Settings) -> AsyncIterator[Any]:
    nc = await nats.connect(single_user.effective_nats_url())  # no login, no TLS: the loopback appliance
    yield nc
    await nc.close()


async def test_an_index_stream_made_before_team_mode_gains_the_per_user_saves(single_user: Settings,
                                                                             single_user_nats: Any) -> None:
    js = single_user_nats.jetstream()
    old = replace(stream_config(single_user), subjects=[SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED])
    await js.add_stream(old)
    await ensure_stream(js, single_user)
    info = await js.stream_info(single_user.index_stream)
    assert set(info.config.subjects or ()) == {SUBJECT_INDEX_GIT, SUBJECT_FILE_SAVED, "ctxpress.v1.u.*.file_saved",
                                               "ctxpress.v1.u.*.index_git"}
    assert info.config.retention == old.retention and info.config.max_age == old.max_age
