"""``ctxpress users rotate`` renews every secret of a developer and names what it cannot reload itself: the
bridge's bearer token is rewritten beside their credentials file, and the NATS nodes of the deployment (which read
the authorization block only when reloaded) are listed (a real PostgreSQL; the nodes are not started: the command
only writes their files)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ctxpress import deployment
from ctxpress_core import identity
from ctxpress_core.settings import Settings
from tests.team_services import embedded_postgres

pytestmark = pytest.mark.services


def _users(home: Path, database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPRESS_")}
    env.update(CTXPRESS_HOME=str(home), CTXPRESS_TEAM="true", CTXPRESS_DATABASE_URL=database_url,
               CTXPRESS_NATS_URL="tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222",
               CTXPRESS_NATS_TLS_CA=str(home / "tls" / "ca.pem"))
    return subprocess.run([sys.executable, "-m", "ctxpress.cli", "users", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_rotate_renews_the_bridge_token_and_names_the_nodes_to_reload(tmp_path: Path) -> None:
    home = tmp_path / "team-home"
    with embedded_postgres(tmp_path / "pg") as url:
        settings = Settings(home=home, database_url=url)
        deployment.setup(settings, [deployment.NatsNode.parse(f"nats-{i}=nats-{i}") for i in (1, 2, 3)])
        out = home / "users" / "alice.json"
        added = _users(home, url, "add", "alice", "--repos", "api", "--out", str(out))
        assert added.returncode == 0, added.stderr
        assert "reload the NATS nodes" in added.stderr and "nats-1, nats-2, nats-3" in added.stderr, added.stderr
        token = home / "users" / "alice.token"
        token.write_text("the-old-bridge-token-0123456789\n")  # as docs/deploy.md has the admin write it

        rotated = _users(home, url, "rotate", "alice", "--out", str(out))
        assert rotated.returncode == 0, rotated.stderr
        new = token.read_text().strip()
        assert new != "the-old-bridge-token-0123456789"
        assert len(new) >= 32 and stat.S_IMODE(token.stat().st_mode) == 0o600
        assert f"new bridge token in {token.resolve()}" in rotated.stderr, rotated.stderr
        assert "restart the bridge" in rotated.stderr
        assert "nats-1, nats-2, nats-3" in rotated.stderr, rotated.stderr
        assert identity.load_credentials(out).user == "alice"
