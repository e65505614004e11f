"""Who a NATS client is in team mode: its subjects, its credentials, what it connects with.

A single-user appliance listens on loopback and trusts whoever reaches it. Team mode (``CTXPRESS_TEAM=true``,
or NATS reachable from other hosts) gives every developer a NATS user that may publish only on
``ctxpress.v1.u.<user>.>``: the worker reads the user from the subject a request arrived on, which NATS let
only that user publish on, and checks the user's repository grants (``workers/grants.py``). docs/security.md
says why user/password + permissions, and what each credential may do. The server's side (the authorization
block, ``ctxpress users``) is ``ctxpress.team``.

Shared by the CLI, the workers, the index worker and the editor doors (``load_credentials``).
"""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxpress_core.errors import CtxpressError
from ctxpress_core.private_files import write_private_file
from ctxpress_core.settings import Settings

USER_SUBJECT_PREFIX = "ctxpress.v1.u"
# A sharded team's forwarded requests: ``ctxpress.v1.s.<shard>.u.<user>.<kind>``, published by the gateway only.
FORWARDED_SUBJECT_PREFIX = "ctxpress.v1.s"
# What an editor sends, each on ``ctxpress.v1.u.<user>.<kind>``.
# What the completion worker serves; the saves and hook events go into the index stream for the index worker.
COMPLETION_KINDS = ("complete", "file_opened", "feedback", "cancel")
USER_KINDS = (*COMPLETION_KINDS, "file_saved", "index_git")
WORKER_USER = "worker"  # the completion worker (and the probes of `ctxpress up` and the supervisor)
INDEXER_USER = "indexer"  # the index worker: the index stream through JetStream, nothing of the editors' subjects
# The gateway of a sharded team: reads the editors' requests and forwards each, with its user in the subject, to the
# shard that holds the file (``shard_user_subject``); nobody else may publish there, so a shard trusts that user.
GATEWAY_USER = "gateway"
# The team console (ctxpress/console/): the index stream's dead letters (read, retried on their own subject, discarded)
# and the index stream's state; no completion subject, no other JetStream call.
CONSOLE_USER = "console"
# The name of an unscoped hooks credential that older appliances issued; no longer issued or accepted (git
# hooks publish as a developer, or as a hooks user scoped to its granted repositories), and never a user's name.
HOOKS_USER = "hooks"
SERVICE_USERS = (WORKER_USER, INDEXER_USER, GATEWAY_USER, CONSOLE_USER)
RESERVED_NAMES = (*SERVICE_USERS, HOOKS_USER)
# What a team user is: a developer (their editor and their git hooks), or git hooks alone (a CI runner, a
# server's checkout) whose index events reach only the repositories it is granted.
USER_KIND_DEVELOPER = "developer"
USER_KIND_HOOKS = "hooks"
# A NATS subject token (no '.', '*', '>' or space) that is also a plain file and column value.
# fullmatch, never match with "$": "$" also matches before a final newline, and "alice\n" would be a user name
# (written into the NATS authorization block, and a subject token)
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
CREDENTIALS_FORMAT = "ctxpress-nats-credentials/1"
# Every password is generated here (192 random bits), so bcrypt's cost adds no strength against guessing; it
# keeps a leaked config from being a list of working passwords. Developers connect once per editor session;
# the worker credential is also used by the supervisor's probe once a second, so its cost is the minimum.
DEVELOPER_BCRYPT_ROUNDS = 10
SERVICE_BCRYPT_ROUNDS = 4
AUTHORIZATION_FILE = "authorization.conf"


class TeamConfigError(CtxpressError):
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
    from ctxpress_core.tls import TlsConfigError, ensure_tls_files

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
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid user name {name!r}: lower-case letters, digits, '-' and '_', at most 64")
    return name


def user_subject(user: str, kind: str) -> str:
    """``ctxpress.v1.u.<user>.<kind>``; ``user`` may be ``*`` for the workers' subscriptions."""
    if kind not in USER_KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(USER_KINDS)}")
    return f"{USER_SUBJECT_PREFIX}.{user}.{kind}"


def shard_user_subject(shard: int | str, user: str, kind: str) -> str:
    """``ctxpress.v1.s.<shard>.u.<user>.<kind>``: a user's request as the gateway forwards it to one shard; ``shard``
    and ``user`` may be ``*`` for subscriptions and permissions."""
    if kind not in COMPLETION_KINDS:
        raise ValueError(f"the shards do not serve {kind!r}; they serve {', '.join(COMPLETION_KINDS)}")
    return f"{FORWARDED_SUBJECT_PREFIX}.{shard}.u.{user}.{kind}"


def forwarded_to_shard(subject: str, user: str, shard: int) -> str:
    """Where the gateway forwards a request that arrived on ``subject`` (a per-user one) for ``shard``."""
    kind = subject_kind(subject)
    if kind is None or kind not in COMPLETION_KINDS:
        raise ValueError(f"{subject!r} is not a per-user completion subject")
    return shard_user_subject(shard, user, kind)


def _user_and_kind(subject: str) -> tuple[str, str] | None:
    if subject.startswith(f"{FORWARDED_SUBJECT_PREFIX}."):
        parts = subject.split(".")  # ctxpress v1 s <shard> u <user> <kind>
        if len(parts) != 7 or parts[4] != "u" or not parts[3].isdigit() or parts[6] not in COMPLETION_KINDS:
            return None
        user, kind = parts[5], parts[6]
    else:
        head, _, rest = subject.partition(f"{USER_SUBJECT_PREFIX}.")
        if head or not rest:
            return None
        user, _, kind = rest.partition(".")
        if kind not in USER_KINDS:
            return None
    return (user, kind) if _NAME.fullmatch(user) else None


def subject_user(subject: str) -> str | None:
    """The user a per-user subject belongs to (as an editor sends it, or as the gateway forwards it to a shard);
    None for every other subject (the single-user ones)."""
    found = _user_and_kind(subject)
    return found[0] if found else None


def subject_kind(subject: str) -> str | None:
    """``complete``, ``file_saved``, … for a per-user subject; None otherwise."""
    found = _user_and_kind(subject)
    return found[1] if found else None


def inbox_prefix(user: str) -> str:
    """Replies to a user come on ``_INBOX.<user>.…``: each user may subscribe only there, so nobody can
    listen to the completions (other people's code) sent to someone else."""
    return f"_INBOX.{user}"


def _literal_subject(subject: str) -> bool:
    tokens = subject.split(".")
    return all(token and token not in ("*", ">") and not any(c.isspace() for c in token) for token in tokens)


def reply_refused(subject: str, reply: str | None, *, team: bool) -> str | None:
    """Why a service must neither serve nor answer a message it answers (a request, a feedback, a status question,
    not a cancel) that came on ``subject`` asking for an answer at ``reply``; None when it may serve it (and
    answer at ``reply``, when there is one).

    The completion worker and the gateway have ``allow_responses``: nats-server lets their one answer to a request
    through whatever the reply subject is, so whoever chooses the reply chooses where a service publishes (a
    request as another user on a shard's subject, a dead letter, the JetStream API). Answers therefore go only to
    the sender's own inbox: ``_INBOX.<user>.`` for a request on a user's subject, the gateway's inbox for one on a
    shard's subject (only the gateway publishes there, and always asks). A forwarded request without a reply, and
    a completion request without one, cannot be the gateway's or an editor's: JetStream sends the ack of a
    developer's own publish to whatever reply subject it named, with no reply of its own. On the single-user
    subjects, which in team mode only the services' probes may use, an answer goes to an ``_INBOX.`` subject;
    on a single-user appliance (loopback, one developer) anywhere."""
    if subject.startswith(f"{FORWARDED_SUBJECT_PREFIX}."):
        owner: str | None = inbox_prefix(GATEWAY_USER)
        needs_reply = True
    else:
        user = subject_user(subject)
        owner = inbox_prefix(user) if user is not None else ("_INBOX" if team else None)
        needs_reply = user is not None and subject_kind(subject) == "complete"
    if not reply:
        return "a request that asks no answer here comes from no client of this service" if needs_reply else None
    if not _literal_subject(reply):
        return "the reply subject is not a plain subject"
    if owner is not None and not reply.startswith(f"{owner}."):
        return f"answers to this subject go to {owner}.* only"
    return None


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
            from ctxpress_core.tls import TlsConfigError, client_context

            try:
                options["tls"] = client_context(self.ca)
            except TlsConfigError as exc:
                raise TeamConfigError(f"credentials of {self.user}: {exc}") from None
        return options

    def subject(self, kind: str) -> str:
        return user_subject(self.user, kind)

    @property
    def plaintext(self) -> bool:
        """Issued for a NATS without TLS (no CA, not a tls:// URL): the only case its password may go in clear
        (``ctxpress_core.nats_connect``)."""
        return self.ca is None and not self.nats_url.lower().startswith("tls://")


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


# --- the service credentials (worker, indexer) ----------------------------------------------------------


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
    """The worker and indexer credentials of this appliance, created on first use under ``<home>/team``."""
    team_dir(settings).mkdir(parents=True, exist_ok=True, mode=0o700)
    # an unscoped hooks credential left by an older appliance: useless now, and not to be handed out
    service_credentials_path(settings, HOOKS_USER).unlink(missing_ok=True)
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


def service_credentials(settings: Settings, user: str = WORKER_USER) -> NatsCredentials:
    """A service's credential (``WORKER_USER``, ``INDEXER_USER``, ``GATEWAY_USER``): this appliance's own with the
    embedded NATS; with an external one, ``CTXPRESS_NATS_CREDENTIALS`` (its operator mounts that service's file
    there) or, for the index worker, ``CTXPRESS_NATS_INDEXER_CREDENTIALS`` when given."""
    if settings.nats_url is None:
        path = service_credentials_path(settings, user)
        if not path.exists():
            raise TeamConfigError(f"team mode: no {user} credentials at {path}; `ctxpress up` creates them")
        return load_credentials(path)
    if user == INDEXER_USER and settings.nats_indexer_credentials is not None:
        path = settings.nats_indexer_credentials
    elif settings.nats_credentials is None:
        raise TeamConfigError(
            f"team mode: NATS at {settings.nats_url} needs authentication, and CTXPRESS_NATS_CREDENTIALS is not set "
            f"(point it at the {user} credentials, {service_credentials_path(settings, user)} where "
            "`ctxpress users` runs; see docs/security.md)")
    else:
        path = settings.nats_credentials
    credentials = load_credentials(path)
    if credentials.user != user:  # each service's permissions are its own: another's would fail at its first step
        raise TeamConfigError(f"{path} holds the NATS credentials of {credentials.user!r}; this service connects as "
                              f"{user!r} ({service_credentials_path(settings, user).name} where `ctxpress users` runs)")
    return credentials if credentials.ca is not None else replace(credentials, ca=client_ca(settings))


def service_connect_options(settings: Settings, user: str = WORKER_USER) -> dict[str, Any]:
    """What a worker or a probe adds to ``nats.connect``: nothing on a single-user appliance; in team mode
    its service credential, or ``TeamConfigError`` (the workers refuse to start without it)."""
    if not team_mode(settings):
        return {}
    return service_credentials(settings, user).connect_options()
