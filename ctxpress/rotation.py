"""What ``ctxpress users rotate`` renews besides the NATS password, and what it cannot reach itself.

A developer has two secrets: the NATS password in their credentials file, and (if an HTTP bridge speaks for them)
the bridge's bearer token, ``users/<name>.token`` beside that file (docs/deploy.md). A rotation that left the token
would leave whoever took the old file a way in through the bridge, so the token is renewed with the password.

The bridge reads its token when it starts: it must be restarted (the command says so). The NATS nodes that still
need a reload are named by ``ctxpress.team.sync_authorization``, for every command that changes who may log in.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from ctxpress_core.private_files import write_private_file
from ctxpress_core.settings import Settings

USERS_DIR = "users"
TOKEN_SUFFIX = ".token"


def token_paths(settings: Settings, name: str, credentials_out: Path | None) -> list[Path]:
    """Where a bridge token of ``name`` may be: beside the credentials file being written, and in the deployment's
    ``users/`` folder."""
    places = [settings.state_dir / USERS_DIR / f"{name}{TOKEN_SUFFIX}"]
    if credentials_out is not None:
        places.insert(0, credentials_out.parent / f"{name}{TOKEN_SUFFIX}")
    return list(dict.fromkeys(p.expanduser().resolve() for p in places))


def rotate_bridge_tokens(settings: Settings, name: str, credentials_out: Path | None) -> list[Path]:
    """A new bearer token in each existing token file of ``name`` (0600); returns the files rewritten."""
    rewritten = []
    for path in token_paths(settings, name, credentials_out):
        if path.exists():
            write_private_file(path, secrets.token_urlsafe(32) + "\n")
            rewritten.append(path)
    return rewritten

