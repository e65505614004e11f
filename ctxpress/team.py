"""Team mode's nats-server side: the authorization block the project writes for its users and services,
reloading it, and what ``ctxpress up`` does for team mode. Identity itself (subjects, credentials, what
a client connects with) is ``ctxpress_core.identity``, shared with the workers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxpress_core.identity import (
    AUTHORIZATION_FILE,
    COMPLETION_KINDS,
    GATEWAY_USER,
    INDEXER_USER,
    RESERVED_NAMES,
    SERVICE_BCRYPT_ROUNDS,
    USER_KIND_DEVELOPER,
    USER_KIND_HOOKS,
    USER_SUBJECT_PREFIX,
    WORKER_USER,
    NatsCredentials,
    TeamConfigError,
    bcrypt_hash,
    ensure_service_credentials,
    inbox_prefix,
    monitor_host,
    service_credentials,
    shard_user_subject,
    team_mode,
    tls_on,
    user_subject,
    write_private_file,
)
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import SUBJECT_CANCEL, SUBJECT_FILE_OPENED, SUBJECT_INDEX_DEAD
from indexer.stream import dead_letter_stream

# --- the nats-server authorization block ---------------------------------------------------------------


@dataclass(frozen=True)
class TeamUser:
    name: str
    password_hash: str  # bcrypt
    kind: str = USER_KIND_DEVELOPER


def developer_permissions(name: str) -> dict[str, Any]:
    return {"publish": {"allow": [f"{USER_SUBJECT_PREFIX}.{name}.>"]},
            "subscribe": {"allow": [f"{inbox_prefix(name)}.>"]}}


def hooks_permissions(name: str) -> dict[str, Any]:
    # A plain publish on its own index subject, with a reply inbox: JetStream stores it and acks to the inbox.
    # The index worker indexes it only into a repository ``name`` is granted. No JetStream API (the workers
    # create the stream, so a hooks user can neither change nor read it) and no completion requests.
    return {"publish": {"allow": [user_subject(name, "index_git")]},
            "subscribe": {"allow": [f"{inbox_prefix(name)}.>"]}}


def worker_permissions(settings: Settings) -> dict[str, Any]:
    probes = [settings.completion_subject, settings.feedback_subject, settings.index_status_subject]
    return {
        # The single-user subjects: the probes of `ctxpress up` and the supervisor connect as the worker
        # (requests there carry no user and are refused). No JetStream: the index stream is the indexer's.
        "publish": {"allow": probes},
        "subscribe": {"allow": [*(user_subject("*", kind) for kind in COMPLETION_KINDS),
                                *(shard_user_subject("*", "*", kind) for kind in COMPLETION_KINDS), *probes,
                                f"{settings.completion_subject}.*", SUBJECT_FILE_OPENED, f"{SUBJECT_FILE_OPENED}.*",
                                SUBJECT_CANCEL, f"{inbox_prefix(WORKER_USER)}.>"]},
        # One reply to each request it received, and nothing else on other people's inboxes.
        "allow_responses": True,
    }


def gateway_permissions(settings: Settings) -> dict[str, Any]:
    """It reads every user's completion subjects and forwards each request to one shard, the user in the subject it
    publishes on (``ctxpress.v1.s.<shard>.u.<user>.<kind>``): it alone may publish there, so the shards trust it."""
    single_user = [settings.completion_subject, SUBJECT_FILE_OPENED]
    return {
        "publish": {"allow": [*(shard_user_subject("*", "*", kind) for kind in COMPLETION_KINDS),
                              *(f"{subject}.*" for subject in single_user)]},
        "subscribe": {"allow": [*(user_subject("*", kind) for kind in COMPLETION_KINDS), *single_user,
                                f"{inbox_prefix(GATEWAY_USER)}.>"]},
        "allow_responses": True,  # the shard's reply, relayed to the editor's inbox
    }


def indexer_api_subjects(settings: Settings) -> list[str]:
    """The JetStream API calls the index worker makes, and no others: it makes (or widens) the index stream, its
    durable consumer and the dead-letter stream, pulls from its consumer and reads the dead letters' count. It
    cannot delete or purge a stream, read another stream or consumer, or list them."""
    stream, consumer, dead = settings.index_stream, settings.index_consumer, dead_letter_stream(settings)
    api = "$JS.API"
    return [f"{api}.STREAM.INFO.{stream}", f"{api}.STREAM.CREATE.{stream}", f"{api}.STREAM.UPDATE.{stream}",
            f"{api}.STREAM.INFO.{dead}", f"{api}.STREAM.CREATE.{dead}",
            f"{api}.CONSUMER.INFO.{stream}.{consumer}", f"{api}.CONSUMER.CREATE.{stream}.{consumer}",
            f"{api}.CONSUMER.CREATE.{stream}.{consumer}.>", f"{api}.CONSUMER.DURABLE.CREATE.{stream}.{consumer}",
            f"{api}.CONSUMER.MSG.NEXT.{stream}.{consumer}", f"$JS.ACK.{stream}.{consumer}.>"]


def indexer_permissions(settings: Settings) -> dict[str, Any]:
    return {
        # JetStream on its own stream and consumer only; it reads the editors' saves and hook events from the stream,
        # never from their subjects. The events it gives up on, to the dead letters.
        "publish": {"allow": [*indexer_api_subjects(settings), SUBJECT_INDEX_DEAD]},
        "subscribe": {"allow": [settings.index_status_subject, f"{inbox_prefix(INDEXER_USER)}.>"]},
        "allow_responses": True,  # its status, to the probes
    }


def render_authorization(settings: Settings, users: Iterable[TeamUser], services: dict[str, NatsCredentials]) -> str:
    """The ``authorization`` block nats-server includes (its config syntax accepts JSON values)."""
    entries: list[dict[str, Any]] = [
        {"user": WORKER_USER, "password": bcrypt_hash(services[WORKER_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": worker_permissions(settings)},
        {"user": INDEXER_USER, "password": bcrypt_hash(services[INDEXER_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": indexer_permissions(settings)},
        {"user": GATEWAY_USER, "password": bcrypt_hash(services[GATEWAY_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": gateway_permissions(settings)},
    ]
    for user in sorted(users, key=lambda u: u.name):
        if user.name in RESERVED_NAMES:
            continue  # never shadow a service user (the CLI refuses these names)
        permissions = hooks_permissions(user.name) if user.kind == USER_KIND_HOOKS else developer_permissions(user.name)
        entries.append({"user": user.name, "password": user.password_hash, "permissions": permissions})
    return ("# Written by ctxpress (`ctxpress up`, `ctxpress users`); changes here are overwritten.\n"
            f"authorization: {json.dumps({'users': entries}, indent=2)}\n")


def authorization_path(settings: Settings) -> Path:
    return settings.state_dir / "nats" / AUTHORIZATION_FILE


def write_authorization(settings: Settings, users: Iterable[TeamUser]) -> Path:
    path = authorization_path(settings)
    write_private_file(path, render_authorization(settings, users, ensure_service_credentials(settings)))
    return path


def ensure_authorization_file(settings: Settings) -> Path:
    """The block the embedded NATS config includes. Kept when it exists: it holds the developers last synced
    from PostgreSQL, which a NATS restarted by the supervisor must keep accepting."""
    path = authorization_path(settings)
    if not path.exists():
        write_authorization(settings, [])
    return path


def sync_authorization(settings: Settings, report: Callable[[str], None] = print) -> Path:
    """Rewrite the authorization block from PostgreSQL and have the embedded NATS reload it (no restart: the
    connections of users still allowed stay up; those of removed users are closed by nats-server)."""
    from db.team import password_hashes

    users = [TeamUser(name, hashed, kind) for name, hashed, kind in password_hashes(settings.effective_database_url())]
    path = write_authorization(settings, users)
    if settings.nats_url is not None:
        report(f"  NATS is external: include {path} in its configuration and reload it (nats-server --signal reload)")
    elif team_mode(settings) and reload_nats(settings):
        report(f"  NATS reloaded {path.name}")
    return path


def _config_load_time(varz_url: str) -> str | None:
    try:
        with urllib.request.urlopen(varz_url, timeout=2.0) as response:
            return str(json.loads(response.read()).get("config_load_time"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def signal_reload(pid: int, monitor_url: str, timeout_s: float = 10.0) -> bool:
    """SIGHUP to the nats-server ``pid``, then wait until its monitoring endpoint (``http://host:port``) says it
    loaded the config again; False when it did not within ``timeout_s``."""
    varz = f"{monitor_url}/varz"
    before = _config_load_time(varz)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = _config_load_time(varz)
        if now is not None and now != before:
            return True
        time.sleep(0.05)
    return False


def reload_nats(settings: Settings, timeout_s: float = 10.0) -> bool:
    """SIGHUP to the embedded nats-server, then wait until it says it loaded the config again. False when it is
    not running (it reads the file when it starts); ``TeamConfigError`` when it did not take the new config."""
    from ctxpress.parts.nats_server import NatsPart

    pid = NatsPart(settings).pid()
    if pid is None:
        return False
    if signal_reload(pid, f"http://{monitor_host(settings)}:{settings.nats_monitor_port}", timeout_s):
        return True
    raise TeamConfigError(f"nats-server (pid {pid}) did not reload its configuration in {timeout_s:.0f}s; "
                          f"see {settings.log_dir / 'nats.log'}")


def server_info(url: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """The INFO greeting of the (first) NATS server of ``url`` (sent in plain text before any TLS)."""
    server = url.split(",")[0].strip()
    parts = urlsplit(server if "://" in server else f"nats://{server}")
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=timeout_s) as sock:
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0]
    if not line.startswith(b"INFO "):
        raise TeamConfigError(f"NATS at {server} did not greet with INFO: {line[:60]!r}")
    return dict(json.loads(line[5:]))


def server_requires_auth(url: str, timeout_s: float = 2.0) -> bool:
    """Whether the (first) NATS server of ``url`` says ``auth_required`` in its INFO greeting."""
    return bool(server_info(url, timeout_s).get("auth_required"))


# --- `ctxpress up` in team mode ----------------------------------------------------------------------------


def prepare_up(settings: Settings) -> None:
    """Before any part starts: the credentials the parts will use, and the block the embedded NATS includes."""
    ensure_service_credentials(settings)  # creates the TLS files too, when TLS is on
    if settings.nats_url is None:
        ensure_authorization_file(settings)
    else:
        service_credentials(settings)  # the workers' credential for an external NATS must be there


def after_part_started(settings: Settings, name: str, report: Callable[[str], None] = print) -> None:
    if name == "nats":
        url = settings.effective_nats_url()
        try:
            info = server_info(url)
        except OSError as exc:
            raise TeamConfigError(f"cannot read the greeting of NATS at {url}: {exc}") from None
        hint = " (started before team mode was on? `ctxpress down` first)" if settings.nats_url is None else ""
        if not info.get("auth_required"):
            raise TeamConfigError(f"team mode: NATS at {url} lets clients in without authentication; refusing to "
                                  f"serve a team on it{hint} (see docs/security.md)")
        if tls_on(settings) and not info.get("tls_required"):
            raise TeamConfigError(f"team mode: NATS at {url} speaks plain text; refusing to serve a team on it{hint} "
                                  "(see docs/security.md)")
    elif name == "postgres" and settings.nats_url is None:
        sync_authorization(settings, report)  # the developers added while the appliance was down
