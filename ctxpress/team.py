"""Team mode: who may ask the appliance for what, enforced by NATS rather than read from the payload.

A single-user appliance listens on loopback and trusts whoever reaches it. Team mode (``CTXPRESS_TEAM=true``,
or NATS reachable from other hosts) gives every developer a NATS user that may publish only on
``ctxpress.v1.u.<user>.>``: the worker reads the user from the subject a request arrived on, which NATS let
only that user publish on, and checks the user's repository grants (``workers/grants.py``). docs/security.md
says why user/password + permissions, and what each credential may do.

Shared by the CLI (``ctxpress users``, ``ctxpress up``), the workers and the editor (``load_credentials``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxpress.settings import Settings
from ctxpress.wire.v1 import SUBJECT_CANCEL, SUBJECT_FILE_OPENED, SUBJECT_INDEX_GIT

USER_SUBJECT_PREFIX = "ctxpress.v1.u"
# What an editor sends, each on ``ctxpress.v1.u.<user>.<kind>``.
USER_KINDS = ("complete", "file_opened", "feedback", "cancel", "file_saved")
WORKER_USER = "worker"  # the completion and index workers (and the probes of `ctxpress up` and the supervisor)
HOOKS_USER = "hooks"  # git hooks: index events only
SERVICE_USERS = (WORKER_USER, HOOKS_USER)
# A NATS subject token (no '.', '*', '>' or space) that is also a plain file and column value.
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
CREDENTIALS_FORMAT = "ctxpress-nats-credentials/1"
# Every password is generated here (192 random bits), so bcrypt's cost adds no strength against guessing; it
# keeps a leaked config from being a list of working passwords. Developers connect once per editor session;
# the worker credential is also used by the supervisor's probe once a second, so its cost is the minimum.
DEVELOPER_BCRYPT_ROUNDS = 10
SERVICE_BCRYPT_ROUNDS = 4
AUTHORIZATION_FILE = "authorization.conf"


class TeamConfigError(RuntimeError):
    """Team mode is on but authentication is not set up (or a credentials file is unusable)."""


# --- mode ---------------------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def nats_hosts(url: str) -> list[str]:
    """The host of every server in a (comma-separated) NATS URL."""
    hosts = []
    for server in url.split(","):
        server = server.strip()
        parts = urlsplit(server if "://" in server else f"nats://{server}")
        hosts.append(parts.hostname or "")
    return hosts


def team_mode(settings: Settings) -> bool:
    """On when asked for, or when NATS is reachable from other hosts (an external server that is not on
    loopback, or the embedded one bound to a non-loopback address): then anyone on the network could ask."""
    if settings.team:
        return True
    if settings.nats_url is not None:
        return not all(is_loopback(host) for host in nats_hosts(settings.nats_url))
    return not is_loopback(settings.nats_bind_host or settings.bind_host)


def tls_on(settings: Settings) -> bool:
    """TLS on the embedded NATS's client port: team mode, unless ``CTXPRESS_NATS_TLS=false``."""
    return team_mode(settings) and settings.nats_tls and settings.nats_url is None


def client_ca(settings: Settings) -> str | None:
    """The CA certificate (PEM) clients verify this appliance's NATS with; None when NATS speaks plain text."""
    from ctxpress.tls import TlsConfigError, ensure_tls_files

    try:
        if tls_on(settings):
            return ensure_tls_files(settings).ca_pem()
        if settings.nats_url is not None and settings.nats_tls_ca is not None:
            return Path(settings.nats_tls_ca).expanduser().read_text()
    except (TlsConfigError, OSError) as exc:
        raise TeamConfigError(f"NATS TLS: {exc}") from None
    return None


def monitor_host(settings: Settings) -> str:
    """The embedded NATS monitoring endpoint lists connections and subjects: loopback only in team mode."""
    return "127.0.0.1" if team_mode(settings) else settings.bind_host


# --- subjects -----------------------------------------------------------------------------------------


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"invalid user name {name!r}: lower-case letters, digits, '-' and '_', at most 64")
    return name


def user_subject(user: str, kind: str) -> str:
    """``ctxpress.v1.u.<user>.<kind>``; ``user`` may be ``*`` for the workers' subscriptions."""
    if kind not in USER_KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(USER_KINDS)}")
    return f"{USER_SUBJECT_PREFIX}.{user}.{kind}"


def subject_user(subject: str) -> str | None:
    """The user a per-user subject belongs to; None for every other subject (the single-user ones)."""
    head, _, rest = subject.partition(f"{USER_SUBJECT_PREFIX}.")
    if head or not rest:
        return None
    user, _, kind = rest.partition(".")
    return user if kind in USER_KINDS and _NAME.match(user) else None


def subject_kind(subject: str) -> str | None:
    """``complete``, ``file_saved``, … for a per-user subject; None otherwise."""
    if subject_user(subject) is None:
        return None
    return subject.rsplit(".", 1)[1]


def inbox_prefix(user: str) -> str:
    """Replies to a user come on ``_INBOX.<user>.…``: each user may subscribe only there, so nobody can
    listen to the completions (other people's code) sent to someone else."""
    return f"_INBOX.{user}"


# --- credentials files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NatsCredentials:
    """What a client needs to connect as one user; stored as a small JSON file (``write_credentials``)."""

    nats_url: str
    user: str
    password: str
    ca: str | None = None  # PEM: the CA that signed the server's TLS certificate (None: plain text)

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` (besides the URL)."""
        options: dict[str, Any] = {"user": self.user, "password": self.password,
                                   "inbox_prefix": inbox_prefix(self.user)}
        if self.ca is not None:
            from ctxpress.tls import TlsConfigError, client_context

            try:
                options["tls"] = client_context(self.ca)
            except TlsConfigError as exc:
                raise TeamConfigError(f"credentials of {self.user}: {exc}") from None
        return options

    def subject(self, kind: str) -> str:
        return user_subject(self.user, kind)


def new_password() -> str:
    return secrets.token_urlsafe(24)


def bcrypt_hash(password: str, rounds: int) -> str:
    import bcrypt

    # nats-server recognises a bcrypt hash by its "$2a$"-style prefix.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds, prefix=b"2a")).decode()


def credentials_text(credentials: NatsCredentials) -> str:
    raw = {"format": CREDENTIALS_FORMAT, "nats_url": credentials.nats_url, "user": credentials.user,
           "password": credentials.password}
    if credentials.ca is not None:
        raw["ca"] = credentials.ca
    return json.dumps(raw, indent=2) + "\n"


def write_credentials(path: Path, credentials: NatsCredentials) -> Path:
    """Owner-only (0600), written whole or not at all."""
    write_private_file(path, credentials_text(credentials))
    return path


def load_credentials(path: str | Path) -> NatsCredentials:
    """Read a credentials file written by ``ctxpress users add`` (``Settings.nats_credentials``).

    JSON: ``{"format": "ctxpress-nats-credentials/1", "nats_url": "tls://host:4222", "user": "alice",
    "password": "...", "ca": "-----BEGIN CERTIFICATE-----..."}`` (``ca`` only when NATS speaks TLS).
    Connect with ``nats.connect(c.nats_url, **c.connect_options())`` and send on
    ``c.subject("complete")`` etc. Raises ``TeamConfigError`` saying what is wrong with the file.
    """
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as exc:
        raise TeamConfigError(f"cannot read NATS credentials {path}: {exc.strerror or exc}") from None
    if "BEGIN NATS USER JWT" in text:
        raise TeamConfigError(f"{path} is a NATS JWT .creds file; ctxpress needs the file `ctxpress users add` "
                              "writes (nats_url, user, password)")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise TeamConfigError(f"{path} is not a ctxpress credentials file (not JSON: {exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != CREDENTIALS_FORMAT:
        raise TeamConfigError(f"{path} is not a ctxpress credentials file (expected format {CREDENTIALS_FORMAT!r})")
    missing = [k for k in ("nats_url", "user", "password") if not isinstance(raw.get(k), str) or not raw[k]]
    if missing:
        raise TeamConfigError(f"{path}: missing {', '.join(missing)}")
    ca = raw.get("ca")
    if ca is not None and (not isinstance(ca, str) or "BEGIN CERTIFICATE" not in ca):
        raise TeamConfigError(f"{path}: 'ca' is not a PEM certificate")
    return NatsCredentials(raw["nats_url"], raw["user"], raw["password"], ca)


def write_private_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


# --- the service credentials (worker, hooks) ------------------------------------------------------------


def team_dir(settings: Settings) -> Path:
    return settings.state_dir / "team"


def service_credentials_path(settings: Settings, name: str) -> Path:
    return team_dir(settings) / f"{name}.json"


def public_nats_url(settings: Settings) -> str:
    """The URL written into credentials files: what the developers' machines connect to."""
    if settings.nats_url is not None:
        return settings.nats_url
    host = settings.nats_bind_host or settings.bind_host
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"{'tls' if tls_on(settings) else 'nats'}://{host}:{settings.nats_port}"


def ensure_service_credentials(settings: Settings) -> dict[str, NatsCredentials]:
    """The worker and hooks credentials of this appliance, created on first use under ``<home>/team``."""
    team_dir(settings).mkdir(parents=True, exist_ok=True, mode=0o700)
    url, ca = public_nats_url(settings), client_ca(settings)
    found: dict[str, NatsCredentials] = {}
    for name in SERVICE_USERS:
        path = service_credentials_path(settings, name)
        if not path.exists():
            write_credentials(path, NatsCredentials(url, name, new_password(), ca))
        credentials = load_credentials(path)
        if (credentials.nats_url, credentials.ca) != (url, ca):  # TLS switched on or off, a new certificate
            credentials = replace(credentials, nats_url=url, ca=ca)
            write_credentials(path, credentials)
        found[name] = credentials
    return found


def service_credentials(settings: Settings) -> NatsCredentials:
    """The worker credential: this appliance's own with the embedded NATS, ``CTXPRESS_NATS_CREDENTIALS`` with
    an external one (its operator mounts the worker file there)."""
    if settings.nats_url is None:
        path = service_credentials_path(settings, WORKER_USER)
        if not path.exists():
            raise TeamConfigError(f"team mode: no worker credentials at {path}; `ctxpress up` creates them")
        return load_credentials(path)
    if settings.nats_credentials is None:
        raise TeamConfigError(
            f"team mode: NATS at {settings.nats_url} needs authentication, and CTXPRESS_NATS_CREDENTIALS is not set "
            f"(point it at the worker credentials, {service_credentials_path(settings, WORKER_USER)} where "
            "`ctxpress users` runs; see docs/security.md)")
    credentials = load_credentials(settings.nats_credentials)
    return credentials if credentials.ca is not None else replace(credentials, ca=client_ca(settings))


def service_connect_options(settings: Settings) -> dict[str, Any]:
    """What the workers and the probes add to ``nats.connect``: nothing on a single-user appliance; in team mode
    the worker credential, or ``TeamConfigError`` (the workers refuse to start without it)."""
    if not team_mode(settings):
        return {}
    return service_credentials(settings).connect_options()


# --- the nats-server authorization block ---------------------------------------------------------------


@dataclass(frozen=True)
class TeamUser:
    name: str
    password_hash: str  # bcrypt


def developer_permissions(name: str) -> dict[str, Any]:
    return {"publish": {"allow": [f"{USER_SUBJECT_PREFIX}.{name}.>"]},
            "subscribe": {"allow": [f"{inbox_prefix(name)}.>"]}}


def hooks_permissions() -> dict[str, Any]:
    # A plain publish with a reply inbox: JetStream stores it and acks to the inbox. No JetStream API: the
    # workers create the stream, so a hooks credential can neither change nor read it.
    return {"publish": {"allow": [SUBJECT_INDEX_GIT]}, "subscribe": {"allow": [f"{inbox_prefix(HOOKS_USER)}.>"]}}


def worker_permissions(settings: Settings) -> dict[str, Any]:
    probes = [settings.completion_subject, settings.feedback_subject, settings.index_status_subject]
    return {
        # JetStream: the index stream and its consumer, pulls and acks. The single-user subjects: the probes of
        # `ctxpress up` and the supervisor connect as the worker; requests there carry no user and are refused.
        "publish": {"allow": ["$JS.API.>", "$JS.ACK.>", *probes]},
        "subscribe": {"allow": [f"{USER_SUBJECT_PREFIX}.*.>", *probes, f"{settings.completion_subject}.*",
                                SUBJECT_FILE_OPENED, f"{SUBJECT_FILE_OPENED}.*", SUBJECT_CANCEL,
                                f"{inbox_prefix(WORKER_USER)}.>"]},
        # One reply to each request it received, and nothing else on other people's inboxes.
        "allow_responses": True,
    }


def render_authorization(settings: Settings, users: Iterable[TeamUser], services: dict[str, NatsCredentials]) -> str:
    """The ``authorization`` block nats-server includes (its config syntax accepts JSON values)."""
    entries: list[dict[str, Any]] = [
        {"user": WORKER_USER, "password": bcrypt_hash(services[WORKER_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": worker_permissions(settings)},
        {"user": HOOKS_USER, "password": bcrypt_hash(services[HOOKS_USER].password, SERVICE_BCRYPT_ROUNDS),
         "permissions": hooks_permissions()},
    ]
    for user in sorted(users, key=lambda u: u.name):
        if user.name in SERVICE_USERS:
            continue  # never shadow a service user (the CLI refuses these names)
        entries.append({"user": user.name, "password": user.password_hash,
                        "permissions": developer_permissions(user.name)})
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

    users = [TeamUser(name, hashed) for name, hashed in password_hashes(settings.effective_database_url())]
    path = write_authorization(settings, users)
    if settings.nats_url is not None:
        report(f"  NATS is external: include {path} in its configuration and reload it (nats-server --signal reload)")
    elif team_mode(settings) and reload_nats(settings):
        report(f"  NATS reloaded {path.name}")
    return path


def _config_load_time(settings: Settings) -> str | None:
    url = f"http://{monitor_host(settings)}:{settings.nats_monitor_port}/varz"
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return str(json.loads(response.read()).get("config_load_time"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def reload_nats(settings: Settings, timeout_s: float = 10.0) -> bool:
    """SIGHUP to the embedded nats-server, then wait until it says it loaded the config again. False when it is
    not running (it reads the file when it starts); ``TeamConfigError`` when it did not take the new config."""
    from ctxpress.services import NatsPart

    pid = NatsPart(settings).pid()
    if pid is None:
        return False
    before = _config_load_time(settings)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = _config_load_time(settings)
        if now is not None and now != before:
            return True
        time.sleep(0.05)
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
