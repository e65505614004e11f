"""Team mode: the mode switch, credentials files, the generated nats-server authorization, and what a real
nats-server started from it lets each credential do (PostgreSQL and NATS of their own; no Triton)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import nats
import pytest
from nats.aio.client import Client

from ctxpress import nats_authorization, team
from ctxpress.parts.nats_server import NatsPart
from ctxpress_core import identity
from ctxpress_core.settings import Settings
from ctxpress_core.tls import client_context, tls_dir
from ctxpress_core.wire.v1 import SUBJECT_INDEX_GIT
from indexer.hook_publish import PublishError, TinyNats
from indexer.stream import dead_letter_subject, ensure_stream
from tests.indexer.index_repo import git, make_repo
from tests.kinds import needs
from tests.team_services import add_developer, embedded_postgres, plain_text_login, team_nats, team_settings

# --- no services ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("over", "expected"), [
    ({}, False),
    ({"team": True}, True),
    ({"nats_url": "nats://127.0.0.1:4222"}, False),
    ({"nats_url": "nats://localhost:4222,nats://[::1]:4223"}, False),
    ({"nats_url": "nats://nats.internal:4222"}, True),
    ({"nats_url": "nats://127.0.0.1:4222,nats://10.0.0.7:4222"}, True),
    ({"bind_host": "0.0.0.0"}, True),
    ({"bind_host": "0.0.0.0", "nats_url": "nats://127.0.0.1:4222"}, False),  # NATS itself stays on loopback
    ({"nats_bind_host": "0.0.0.0"}, True),
    ({"bind_host": "0.0.0.0", "nats_bind_host": "127.0.0.1"}, False),
])
def test_team_mode_is_on_when_asked_or_when_nats_is_reachable_from_other_hosts(over: dict[str, Any],
                                                                               expected: bool) -> None:
    assert identity.team_mode(Settings(**over)) is expected


def test_user_subjects_round_trip_and_other_subjects_have_no_user() -> None:
    assert identity.user_subject("alice", "complete") == "ctxpress.v1.u.alice.complete"
    for kind in identity.USER_KINDS:
        subject = identity.user_subject("alice", kind)
        assert identity.subject_user(subject) == "alice" and identity.subject_kind(subject) == kind
    for subject in ("ctxpress.v1.complete", "ctxpress.v1.u.alice", "ctxpress.v1.u.alice.unknown",
                    "ctxpress.v1.u.Alice.complete", "x.ctxpress.v1.u.alice.complete", "ctxpress.v1.u..complete"):
        assert identity.subject_user(subject) is None, subject
    with pytest.raises(ValueError):
        identity.validate_name("a.b")  # a '.' would give the user a second subject token
    with pytest.raises(ValueError):
        identity.user_subject("alice", "index")


def test_credentials_file_round_trip_is_owner_only(tmp_path: Path) -> None:
    creds = identity.NatsCredentials("nats://appliance.example:4222", "alice", "s3cret")
    path = identity.write_credentials(tmp_path / "alice.json", creds)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert identity.load_credentials(path) == creds
    assert json.loads(path.read_text())["format"] == identity.CREDENTIALS_FORMAT
    assert creds.connect_options() == {"user": "alice", "password": "s3cret", "inbox_prefix": "_INBOX.alice"}
    assert creds.subject("file_saved") == "ctxpress.v1.u.alice.file_saved"


@pytest.mark.parametrize(("content", "says"), [
    ("-----BEGIN NATS USER JWT-----\neyJ...\n", "JWT"),
    ("user=alice\n", "not JSON"),
    ('{"nats_url": "nats://x:4222", "user": "a", "password": "b"}', "expected format"),
    (json.dumps({"format": identity.CREDENTIALS_FORMAT, "nats_url": "nats://x:4222", "user": "a"}), "missing password"),
])
def test_unusable_credentials_files_are_refused_with_the_reason(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "creds"
    path.write_text(content)
    with pytest.raises(identity.TeamConfigError, match=says):
        identity.load_credentials(path)
    with pytest.raises(identity.TeamConfigError, match="cannot read"):
        identity.load_credentials(tmp_path / "missing.json")


def _authorization(text: str) -> dict[str, dict[str, Any]]:
    assert text.splitlines()[1].startswith("authorization: ")
    body = json.loads(text.split("authorization: ", 1)[1])
    return {entry["user"]: entry for entry in body["users"]}


def test_generated_authorization_gives_each_credential_only_its_subjects(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, team=True)
    services = identity.ensure_service_credentials(settings)
    for name in identity.SERVICE_USERS:
        assert stat.S_IMODE(identity.service_credentials_path(settings, name).stat().st_mode) == 0o600
    alice_hash = identity.bcrypt_hash("alice-password", 4)
    users = _authorization(nats_authorization.render_authorization(
        settings, [nats_authorization.TeamUser("alice", alice_hash), nats_authorization.TeamUser("worker", alice_hash),
                   nats_authorization.TeamUser("ci", alice_hash, identity.USER_KIND_HOOKS),
                   nats_authorization.TeamUser("hooks", alice_hash, identity.USER_KIND_HOOKS)], services))
    # a user named like a service never shadows it; the unscoped "hooks" credential is gone
    assert sorted(users) == ["alice", "ci", "console", "gateway", "indexer", "worker"]
    assert users["alice"]["password"] == alice_hash and alice_hash.startswith("$2a$")
    for name in identity.SERVICE_USERS:  # plain passwords never reach the config
        hashed = users[name]["password"]
        assert hashed.startswith("$2a$04$") and bcrypt.checkpw(services[name].password.encode(), hashed.encode())
    assert users["alice"]["permissions"] == {"publish": {"allow": ["ctxpress.v1.u.alice.>"]},
                                             "subscribe": {"allow": ["_INBOX.alice.>"]}}
    # a hooks user: its own index subject only (the index worker checks its grants), no completion requests
    assert users["ci"]["permissions"] == {"publish": {"allow": ["ctxpress.v1.u.ci.index_git"]},
                                          "subscribe": {"allow": ["_INBOX.ci.>"]}}
    worker = users["worker"]["permissions"]
    assert worker["allow_responses"] is True
    assert {f"ctxpress.v1.u.*.{kind}" for kind in ("complete", "file_opened", "feedback", "cancel")} <= \
        set(worker["subscribe"]["allow"]) and "_INBOX.worker.>" in worker["subscribe"]["allow"]
    assert not any(s.startswith(("ctxpress.v1.u.", "$JS.")) for s in worker["publish"]["allow"])  # no JetStream
    assert not any(s.endswith((".file_saved", ".index_git", ".>")) for s in worker["subscribe"]["allow"]
                   if s.startswith("ctxpress.v1.u."))
    # a shard's worker serves what the gateway forwards, the user in the subject
    assert {f"ctxpress.v1.s.*.u.*.{kind}" for kind in ("complete", "file_opened", "feedback", "cancel")} <= \
        set(worker["subscribe"]["allow"])
    indexer = users["indexer"]["permissions"]
    # its own stream and consumer, no wildcard over the JetStream API
    dead = f"{settings.index_stream}_DEAD"
    for subject in indexer["publish"]["allow"]:
        if subject.startswith("$JS."):
            tokens = subject.split(".")
            named = tokens.index(settings.index_stream) if settings.index_stream in tokens else tokens.index(dead)
            assert "*" not in tokens[:named + 2] and ">" not in tokens[:named + 2], subject
    assert f"$JS.API.CONSUMER.MSG.NEXT.{settings.index_stream}.{settings.index_consumer}" in \
        indexer["publish"]["allow"]
    # its dead letters on the subject keyed with its own password (a JetStream ack can land on a plain one)
    keyed = dead_letter_subject(settings)
    assert keyed == dead_letter_subject(settings, services[identity.INDEXER_USER].password) != "ctxpress.v1.index.dead"
    assert keyed in indexer["publish"]["allow"] and "ctxpress.v1.index.dead" not in indexer["publish"]["allow"]
    assert [name for name, entry in users.items() if keyed in json.dumps(entry)] == ["indexer"]
    assert indexer["subscribe"] == {"allow": [settings.index_status_subject, "_INBOX.indexer.>"]}
    # the gateway: reads every user's completion subjects, publishes only to the shards' forwarded subjects
    gateway = users["gateway"]["permissions"]
    assert {f"ctxpress.v1.u.*.{kind}" for kind in ("complete", "file_opened", "feedback", "cancel")} <= \
        set(gateway["subscribe"]["allow"])
    assert all(s.startswith(("ctxpress.v1.s.", f"{settings.completion_subject}.", "ctxpress.v1.file_opened."))
               for s in gateway["publish"]["allow"])
    # nobody else may publish where a shard trusts the user in the subject
    for name, entry in users.items():
        if name != "gateway":
            assert not any(s.startswith(("ctxpress.v1.s.", "ctxpress.v1.>", ">"))
                           for s in entry["permissions"]["publish"]["allow"]), name


def test_nats_config_includes_the_users_in_team_mode_only(tmp_path: Path) -> None:
    single = NatsPart(Settings(home=tmp_path / "single"))
    single.argv()
    assert "\ninclude " not in (single.settings.state_dir / "nats" / "nats-server.conf").read_text()
    settings = Settings(home=tmp_path / "team", nats_bind_host="0.0.0.0")
    NatsPart(settings).argv()
    config = (settings.state_dir / "nats" / "nats-server.conf").read_text()
    assert f'listen: "0.0.0.0:{settings.nats_port}"' in config
    assert f'include "{identity.AUTHORIZATION_FILE}"' in config
    assert f'http: "127.0.0.1:{settings.nats_monitor_port}"' in config  # connection lists stay on loopback
    assert (settings.state_dir / "nats" / identity.AUTHORIZATION_FILE).exists()


def test_up_refuses_team_mode_against_an_external_nats_without_credentials(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    env.update(CTXPRESS_HOME=str(tmp_path), CTXPRESS_NATS_URL="nats://nats.team.internal:4222")
    done = subprocess.run([sys.executable, "-m", "ctxpress.cli", "up"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "CTXPRESS_NATS_CREDENTIALS is not set" in done.stderr
    assert not (tmp_path / "run").exists()  # nothing was started


# --- a real nats-server started from the generated configuration --------------------------------------------


@pytest.fixture(scope="module")
@needs("services")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_postgres(tmp_path_factory.mktemp("team-pg")) as url:
        yield url


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Settings]:
    settings = team_settings(tmp_path_factory.mktemp("team-home"), database_url)
    with team_nats(settings):
        yield settings


@pytest.fixture(scope="module")
def alice(settings: Settings) -> identity.NatsCredentials:
    return add_developer(settings, "alice", ["alpha"])


@pytest.fixture(scope="module")
def bob(settings: Settings) -> identity.NatsCredentials:
    return add_developer(settings, "bob", ["beta"])


class Connection:
    def __init__(self, client: Client, errors: list[str]) -> None:
        self.client = client
        self.errors = errors


async def connect(url: str, **options: Any) -> Connection:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    client = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0,
                                error_cb=on_error, **options)
    return Connection(client, errors)


@pytest.fixture
async def worker_conn(settings: Settings) -> AsyncIterator[Connection]:
    conn = await connect(settings.effective_nats_url(), **identity.service_connect_options(settings))
    yield conn
    await conn.client.close()


@pytest.fixture
async def indexer_conn(settings: Settings) -> AsyncIterator[Connection]:
    conn = await connect(settings.effective_nats_url(),
                         **identity.service_connect_options(settings, identity.INDEXER_USER))
    yield conn
    await conn.client.close()


async def test_the_completion_worker_cannot_touch_the_index_nor_the_indexer_the_editors(
        settings: Settings, worker_conn: Connection, indexer_conn: Connection) -> None:
    with pytest.raises(nats.errors.TimeoutError):  # the server drops a JetStream request the worker may not make
        await worker_conn.client.jetstream(timeout=1).stream_info(settings.index_stream)
    assert any("permissions violation" in e for e in worker_conn.errors)
    await indexer_conn.client.subscribe("ctxpress.v1.u.*.complete")
    await indexer_conn.client.flush()
    await asyncio.sleep(0.3)
    assert any("permissions violation" in e and "complete" in e for e in indexer_conn.errors), indexer_conn.errors


async def test_the_indexer_may_use_its_own_stream_and_consumer_and_nothing_else_of_jetstream(
        settings: Settings, indexer_conn: Connection) -> None:
    from indexer.stream import ensure_stream

    js = indexer_conn.client.jetstream(timeout=2)
    await ensure_stream(js, settings)  # what the index worker does when it starts
    sub = await js.pull_subscribe_bind(settings.index_consumer, settings.index_stream)
    assert await sub.consumer_info()
    for forbidden in (js.delete_stream(settings.index_stream), js.purge_stream(settings.index_stream),
                      js.streams_info(), js.add_stream(name="ELSEWHERE", subjects=["elsewhere.>"])):
        with pytest.raises(nats.errors.TimeoutError):  # the server drops a request the indexer may not make
            await forbidden
    assert sum("permissions violation" in e for e in indexer_conn.errors) >= 4, indexer_conn.errors
    assert (await js.stream_info(settings.index_stream)).config.name == settings.index_stream  # still there


async def test_only_the_gateway_may_publish_where_a_shard_trusts_the_user_in_the_subject(
        settings: Settings, alice: identity.NatsCredentials) -> None:
    forwarded = identity.shard_user_subject(0, "bob", "complete")
    gateway = await connect(settings.effective_nats_url(),
                            **identity.service_connect_options(settings, identity.GATEWAY_USER))
    worker = await connect(settings.effective_nats_url(), **identity.service_connect_options(settings))
    developer = await connect(alice.nats_url, **alice.connect_options())
    try:
        received = await worker.client.subscribe(identity.shard_user_subject(0, "*", "complete"))
        await worker.client.flush()
        await developer.client.publish(forwarded, b"{}")  # alice posing as bob on shard 0
        await developer.client.flush()
        await gateway.client.publish(forwarded, b"from the gateway")
        await gateway.client.flush()
        msg = await received.next_msg(timeout=3)
        assert msg.data == b"from the gateway"
        with pytest.raises(nats.errors.TimeoutError):
            await received.next_msg(timeout=0.5)
        assert any("permissions violation" in e for e in developer.errors), developer.errors
        assert identity.subject_user(msg.subject) == "bob"
    finally:
        for conn in (gateway, worker, developer):
            await conn.client.close()


async def test_an_unauthenticated_client_cannot_connect(settings: Settings, alice: identity.NatsCredentials) -> None:
    assert alice.ca is not None
    tls = client_context(alice.ca)
    for options in ({}, {"user": "alice", "password": "not-hers"}, {"user": "nobody", "password": "x"}):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(settings.effective_nats_url(), connect_timeout=2, allow_reconnect=False,
                               max_reconnect_attempts=0, tls=tls, **options)


async def test_clients_must_speak_tls_and_verify_the_appliances_certificate(settings: Settings,
                                                                            alice: identity.NatsCredentials) -> None:
    info, answer = plain_text_login(settings.effective_nats_url(), alice.user, alice.password)
    assert info["tls_required"] is True
    # The right password, in clear: the server takes it for a failed TLS handshake and hangs up.
    assert answer == b"" or answer.startswith(b"connection closed"), answer
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not know the appliance's CA
        await nats.connect(settings.effective_nats_url(), connect_timeout=2, allow_reconnect=False,
                           max_reconnect_attempts=0, user=alice.user, password=alice.password)
    conn = await connect(alice.nats_url, **alice.connect_options())  # the credentials file carries the CA
    assert conn.client.is_connected
    await conn.client.close()
    assert stat.S_IMODE((tls_dir(settings) / "server-key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((tls_dir(settings) / "ca-key.pem").stat().st_mode) == 0o600


async def test_a_user_cannot_publish_on_another_users_subject(settings: Settings, worker_conn: Connection,
                                                             alice: identity.NatsCredentials,
                                                             bob: identity.NatsCredentials) -> None:
    seen: list[str] = []

    async def on_request(msg: Any) -> None:
        seen.append(msg.subject)
        await msg.respond(b'{"ok": true}')

    sub = await worker_conn.client.subscribe("ctxpress.v1.u.*.complete", cb=on_request)
    await worker_conn.client.flush()
    conn = await connect(alice.nats_url, **alice.connect_options())
    try:
        reply = await conn.client.request(alice.subject("complete"), b"{}", timeout=5)
        assert json.loads(reply.data) == {"ok": True}
        await conn.client.publish(bob.subject("complete"), b"{}")
        with pytest.raises(nats.errors.TimeoutError):  # the server drops it: no worker ever hears it
            await conn.client.request(bob.subject("complete"), b"{}", timeout=1)
        assert any(f'permissions violation for publish to "{bob.subject("complete")}"' in e for e in conn.errors)
        assert seen == [alice.subject("complete")]
    finally:
        await sub.unsubscribe()
        await conn.client.close()


async def test_a_user_cannot_listen_to_other_users_requests_or_replies(alice: identity.NatsCredentials) -> None:
    conn = await connect(alice.nats_url, **alice.connect_options())
    try:
        for subject in ("_INBOX.>", "_INBOX.bob.>", "ctxpress.v1.u.*.complete", "ctxpress.v1.u.bob.>"):
            await conn.client.subscribe(subject)
            await conn.client.flush()
            await asyncio.sleep(0.1)
            assert any(f'permissions violation for subscription to "{subject.lower()}"' in e.lower()
                       for e in conn.errors), (subject, conn.errors)
    finally:
        await conn.client.close()


async def test_hooks_users_publish_their_own_index_events_only(settings: Settings, indexer_conn: Connection,
                                                              tmp_path: Path) -> None:
    await ensure_stream(indexer_conn.client.jetstream(), settings)  # as the index worker does at start
    made = _ctxpress(settings, "hooks", "ci-alpha", "--repos", "alpha", "--out", str(tmp_path / "ci.json"))
    assert made.returncode == 0, made.stderr
    hooks = identity.load_credentials(tmp_path / "ci.json")
    event = json.dumps({"repository": "alpha", "commit": "a" * 40, "hook": "post-commit", "changes": []}).encode()
    client = TinyNats(settings.effective_nats_url(), hooks.user, hooks.password, hooks.ca)  # the hook's own client
    try:
        (seq,) = client.publish_all(hooks.subject("index_git"), [event], timeout_s=5)
        assert seq > 0
    finally:
        client.close()
    # the unscoped subject whose events were trusted for every repository, and completion requests: refused
    for subject in (SUBJECT_INDEX_GIT, "ctxpress.v1.u.alice.index_git", hooks.subject("complete")):
        client = TinyNats(settings.effective_nats_url(), hooks.user, hooks.password, hooks.ca)
        try:
            with pytest.raises(PublishError, match="Permissions Violation"):
                client.publish_all(subject, [event], timeout_s=5)
        finally:
            client.close()
    conn = await connect(settings.effective_nats_url(), **hooks.connect_options())
    try:
        with pytest.raises(nats.errors.TimeoutError):  # the server drops a request it may not publish
            await conn.client.jetstream(timeout=1).stream_info(settings.index_stream)
        assert any("permissions violation" in e for e in conn.errors)
    finally:
        await conn.client.close()


async def test_hooks_installed_with_the_hooks_credentials_publish_a_commit(settings: Settings,
                                                                         indexer_conn: Connection,
                                                                         tmp_path: Path) -> None:
    js = indexer_conn.client.jetstream()
    await ensure_stream(js, settings)
    before = (await js.stream_info(settings.index_stream)).state.last_seq
    hooks_file = tmp_path / "hooks.json"
    written = _ctxpress(settings, "hooks", "ci-shop", "--repos", "alpha", "--out", str(hooks_file))
    assert written.returncode == 0, written.stderr
    root = make_repo(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    installed = _run([sys.executable, "-m", "ctxpress.cli", "hooks", "install", str(root), "--name", "alpha"],
                     {**env, "CTXPRESS_NATS_CREDENTIALS": str(hooks_file)})
    assert installed.returncode == 0, installed.stderr
    hook = (root / ".git" / "hooks" / "post-commit").read_text()
    assert str(hooks_file) in hook and identity.load_credentials(hooks_file).password not in hook
    (root / "shop" / "more.py").write_text("def more():\n    return 3\n")
    git(root, "add", "-A")
    commit = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "more"]
    committed = _run(commit, {**env, "CTXPRESS_HOOK_VERBOSE": "1"})
    assert committed.returncode == 0 and "sent in" in committed.stderr, committed.stderr
    assert (await js.stream_info(settings.index_stream)).state.last_seq > before


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def _ctxpress(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    env.update(CTXPRESS_HOME=str(settings.home), CTXPRESS_TEAM="true",
               CTXPRESS_DATABASE_URL=settings.effective_database_url(), CTXPRESS_NATS_PORT=str(settings.nats_port),
               CTXPRESS_NATS_MONITOR_PORT=str(settings.nats_monitor_port))
    return subprocess.run([sys.executable, "-m", "ctxpress.cli", "users", *args], env=env, capture_output=True,
                          text=True, timeout=120)


async def test_users_cli_adds_and_removes_a_user_without_restarting_nats(settings: Settings,
                                                                        tmp_path: Path) -> None:
    nats_pid = NatsPart(settings).pid()
    out = tmp_path / "carol.json"
    added = _ctxpress(settings, "add", "carol", "--repos", "alpha, gamma", "--out", str(out))
    assert added.returncode == 0, added.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    carol = identity.load_credentials(out)
    assert (carol.user, carol.nats_url) == ("carol", f"tls://127.0.0.1:{settings.nats_port}")
    assert carol.ca == (tls_dir(settings) / "ca.pem").read_text()
    listed = _ctxpress(settings, "list", "--json")
    assert {"name": "carol", "repositories": ["alpha", "gamma"]}.items() <= next(
        u for u in json.loads(listed.stdout) if u["name"] == "carol").items()

    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    conn = await connect(carol.nats_url, closed_cb=on_closed, **carol.connect_options())
    assert conn.client.is_connected
    assert _ctxpress(settings, "grant", "carol", "--repos", "delta").returncode == 0
    assert _ctxpress(settings, "revoke", "carol", "--repos", "alpha").returncode == 0
    rows = {u["name"]: u["repositories"] for u in json.loads(_ctxpress(settings, "list", "--json").stdout)}
    assert rows["carol"] == ["delta", "gamma"]

    rotated = _ctxpress(settings, "rotate", "carol", "--out", str(tmp_path / "carol-new.json"))
    assert rotated.returncode == 0, rotated.stderr
    await asyncio.wait_for(closed.wait(), timeout=10)  # her connection with the old password is closed
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await connect(carol.nats_url, **carol.connect_options())
    carol = identity.load_credentials(tmp_path / "carol-new.json")
    closed.clear()
    conn = await connect(carol.nats_url, closed_cb=on_closed, **carol.connect_options())
    assert conn.client.is_connected

    removed = _ctxpress(settings, "remove", "carol")
    assert removed.returncode == 0, removed.stderr
    await asyncio.wait_for(closed.wait(), timeout=10)  # nats-server closed the removed user's connection
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await connect(carol.nats_url, **carol.connect_options())
    assert NatsPart(settings).pid() == nats_pid  # reloaded, not restarted

    assert _ctxpress(settings, "add", "worker", "--repos", "alpha").returncode == 2  # reserved
    assert _ctxpress(settings, "add", "Dave.X", "--repos", "alpha").returncode == 2
    assert _ctxpress(settings, "grant", "nobody", "--repos", "alpha").returncode == 2
    assert _ctxpress(settings, "hooks", "hooks", "--repos", "alpha").returncode == 2  # reserved
    assert _ctxpress(settings, "rotate", "nobody").returncode == 2


async def test_no_unscoped_hooks_credential_is_issued_or_accepted(settings: Settings) -> None:
    """The appliance used to create a `hooks` credential whose index events were trusted for every repository,
    and handed it to laptops: whoever held it could put any code into any repository's index."""
    assert not identity.service_credentials_path(settings, identity.HOOKS_USER).exists()
    assert identity.HOOKS_USER not in _authorization(nats_authorization.authorization_path(settings).read_text())
    assert _ctxpress(settings, "hooks").returncode == 2  # a hooks user needs a name and its repositories
    ca = (tls_dir(settings) / "ca.pem").read_text()
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await connect(settings.effective_nats_url(), tls=client_context(ca), user=identity.HOOKS_USER, password="x")


def test_up_refuses_a_nats_that_lets_anyone_in(tmp_path: Path, database_url: str) -> None:
    open_nats = NatsPart(team_settings(tmp_path, database_url, team=False))
    open_nats.start(30)
    try:
        as_team = open_nats.settings.model_copy(update={"team": True})
        assert not team.server_requires_auth(as_team.effective_nats_url())
        with pytest.raises(identity.TeamConfigError, match="without authentication"):
            team.after_part_started(as_team, "nats")
    finally:
        open_nats.stop()


async def test_the_language_server_speaks_as_its_user(settings: Settings, alice: identity.NatsCredentials,
                                                      appliance: Any, nats_client: Any, tmp_path: Path) -> None:
    """`ctxpress lsp` with a credentials file logs in as that user and sends on that user's subjects; the
    reply comes back to that user's inbox. The team NATS relays to the appliance's (single-user) worker."""
    from tests.ctxpress.lsp.test_lsp_server import CURSOR, SOURCE, start_editor, stop_editor

    creds = identity.write_credentials(tmp_path / "alice.json", alice)
    seen: list[str] = []
    worker = await connect(settings.effective_nats_url(), **identity.service_connect_options(settings))

    async def relay(msg: Any) -> None:
        seen.append(msg.subject)
        reply = await nats_client.request(appliance.settings.completion_subject, msg.data, timeout=170)
        await msg.respond(reply.data)

    await worker.client.subscribe(identity.user_subject("*", "complete"), cb=relay)
    await worker.client.flush()
    root = tmp_path / "alpha"
    root.mkdir()
    (root / ".git").mkdir()  # a git work tree's root, as far as the language server looks
    (root / "m.py").write_text(SOURCE)
    editor = await start_editor(appliance, {"credentials": str(creds)}, root)
    try:
        uri = (root / "m.py").as_uri()
        editor.open(uri, SOURCE)
        result = await editor.inline(uri, *CURSOR)
        assert result is not None and result.items and str(result.items[0].insert_text).startswith("a + b")
        assert seen == [identity.user_subject("alice", "complete")]
        assert not [m for m in editor.messages if m.type == 2]  # no "unreachable" warning: the login worked
    finally:
        await stop_editor(editor)
        await worker.client.close()
