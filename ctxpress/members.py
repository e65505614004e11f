"""A team's members, one implementation of each action for ``ctxpress users`` and the console.

Each action changes PostgreSQL (``db.team``), rewrites and reloads the NATS authorization block where logins change,
and leaves a row in the audit log (``db.console``): the CLI's with the shell user's name, the console's with the
signed-in admin's. A credentials file is returned to the caller, never stored: the CLI prints or writes it, the
console offers it for one download.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ctxpress import team
from ctxpress.rotation import rotate_bridge_tokens
from ctxpress_core import identity
from ctxpress_core.settings import Settings
from db import console as console_store
from db import team as store

Report = Callable[[str], None]


@dataclass(frozen=True)
class Actor:
    """Who acts, for the audit log: ``source`` 'cli' (the shell user) or 'console' (the signed-in admin)."""

    name: str
    source: str

    @classmethod
    def shell(cls) -> Actor:
        try:
            return cls(getpass.getuser(), "cli")
        except (KeyError, OSError):
            return cls("unknown", "cli")


def _quiet(line: str) -> None:
    pass


def repositories(value: str) -> list[str]:
    """``A,B`` as the CLI and the console's forms take it; ValueError with the reason otherwise."""
    names = [r.strip() for r in value.split(",") if r.strip()]
    if not names:
        raise ValueError("give at least one repository name")
    too_long = [r for r in names if len(r) > 256]
    if too_long:
        raise ValueError(f"repository names are at most 256 characters: {too_long[0][:40]}…")
    return names


def _credentials(settings: Settings, name: str, password: str, nats_url: str | None) -> str:
    credentials = identity.NatsCredentials(nats_url or identity.public_nats_url(settings), name, password,
                                           identity.client_ca(settings))
    return identity.credentials_text(credentials)


def add(settings: Settings, actor: Actor, name: str, repos: Iterable[str], kind: str = identity.USER_KIND_DEVELOPER,
        nats_url: str | None = None, report: Report = _quiet) -> str:
    """A new developer or hooks user with these grants; returns their credentials file (the password's only copy)."""
    url = settings.effective_database_url()
    name = identity.validate_name(name)
    if name in identity.RESERVED_NAMES:
        raise ValueError(f"{name!r} is reserved for the appliance's own services")
    if kind not in (identity.USER_KIND_DEVELOPER, identity.USER_KIND_HOOKS):
        raise ValueError(f"unknown kind {kind!r}")
    repos = list(repos)
    password = identity.new_password()
    store.add_user(url, name, identity.bcrypt_hash(password, identity.DEVELOPER_BCRYPT_ROUNDS), repos, kind)
    team.sync_authorization(settings, report)
    console_store.audit(url, actor.name, f"add {kind}", name, f"repositories: {', '.join(repos)}", actor.source)
    return _credentials(settings, name, password, nats_url)


def rotate(settings: Settings, actor: Actor, name: str, nats_url: str | None = None, report: Report = _quiet,
           credentials_out: Path | None = None) -> str:
    """A new password (the old one stops logging in at once) and a new bridge token in each of the user's token
    files (``ctxpress.rotation``); returns the new credentials file."""
    url = settings.effective_database_url()
    password = identity.new_password()
    store.set_password(url, name, identity.bcrypt_hash(password, identity.DEVELOPER_BCRYPT_ROUNDS))
    team.sync_authorization(settings, report)
    for path in rotate_bridge_tokens(settings, name, credentials_out):
        report(f"new bridge token in {path}: restart the bridge that speaks for {name} (it reads the token when it "
               "starts) and give their editor the new one")
    console_store.audit(url, actor.name, "rotate", name, "", actor.source)
    return _credentials(settings, name, password, nats_url)


def grant(settings: Settings, actor: Actor, name: str, repos: Iterable[str]) -> None:
    url, repos = settings.effective_database_url(), list(repos)
    store.grant(url, name, repos)
    console_store.audit(url, actor.name, "grant", name, ", ".join(repos), actor.source)


def revoke(settings: Settings, actor: Actor, name: str, repos: Iterable[str]) -> int:
    """Returns how many grants were removed (the workers stop serving them within 2 s)."""
    url, repos = settings.effective_database_url(), list(repos)
    removed = store.revoke(url, name, repos)
    console_store.audit(url, actor.name, "revoke", name, f"{', '.join(repos)} ({removed} removed)", actor.source)
    return removed


def remove(settings: Settings, actor: Actor, name: str, report: Report = _quiet) -> int:
    """The user, their grants and their saved files; nats-server closes their connections on the reload. The
    workers key a user's engine cache by account (``db.team.grants_of``): a user added again under this name never
    reads the old one's, which ages out of the disk tier like any unused file. Returns the saved files removed."""
    url = settings.effective_database_url()
    saved = store.remove_user(url, name)
    team.sync_authorization(settings, report)
    console_store.audit(url, actor.name, "remove", name, "", actor.source)
    return saved


def sync(settings: Settings, report: Report = _quiet) -> str:
    return str(team.sync_authorization(settings, report))
