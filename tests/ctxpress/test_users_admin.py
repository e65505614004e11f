"""``ctxpress users`` leaves nothing of a developer behind that it should have changed (a real PostgreSQL with
each service's role; the NATS nodes are not started: the commands only write their files).

``rotate`` renews every secret of a developer and names what it cannot reload itself: the bridge's bearer token
is rewritten beside their credentials file, and the NATS nodes of the deployment (which read the authorization
block only when reloaded) are listed. ``remove`` takes their saved files with them, and a new user of the same
name is another account to the workers' engine cache."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from context import prompt
from ctxpress import deployment
from ctxpress_core import identity
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest
from db.models import EMBEDDING_DIM
from db.session import engine_for
from tests.team_services import embedded_postgres
from workers.grants import Grants

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


def _save(url: str, user: str, path: str) -> None:
    """What the index worker writes for a user's saved file (db.chunks: rows owned by the user)."""
    with engine_for(url).begin() as conn:
        repo = conn.execute(text("INSERT INTO repositories (name) VALUES ('api') ON CONFLICT (name)"
                                 " DO UPDATE SET name = excluded.name RETURNING id")).scalar_one()
        conn.execute(text("INSERT INTO indexed_files (repo_id, path, owner, chunk_count) VALUES (:r, :p, :o, 1)"),
                     {"r": repo, "p": path, "o": user})
        conn.execute(text("INSERT INTO code_chunks (repo_id, path, owner, symbol, kind, language, start_line,"
                          " end_line, signature, content, content_hash, name_lexemes, lexemes, embedding)"
                          " VALUES (:r, :p, :o, 'draft', 'function', 'python', 1, 2, 'def draft()',"
                          " 'def draft(): return SECRET', 'h', 'draft', 'secret', :e)"),
                     {"r": repo, "p": path, "o": user, "e": str([0.0] * EMBEDDING_DIM)})


def _owned(url: str, user: str) -> tuple[int, int]:
    with engine_for(url).connect() as conn:
        return (conn.execute(text("SELECT count(*) FROM indexed_files WHERE owner = :o"), {"o": user}).scalar_one(),
                conn.execute(text("SELECT count(*) FROM code_chunks WHERE owner = :o"), {"o": user}).scalar_one())


async def test_a_user_added_again_under_a_removed_name_inherits_nothing(tmp_path: Path) -> None:
    home = tmp_path / "team-home"
    with embedded_postgres(tmp_path / "pg") as superuser:
        settings = Settings(home=home, database_url=superuser)
        deployment.setup(settings, [deployment.NatsNode.parse("nats-1=nats-1")])
        urls = {p.stem: p.read_text().strip() for p in deployment.roles(settings)}
        admin, worker = urls["admin"], urls["completion"]
        assert _users(home, admin, "add", "alice", "--repos", "api").returncode == 0
        assert _users(home, admin, "add", "bob", "--repos", "api").returncode == 0
        _save(urls["indexer"], "alice", "src/draft.py")
        _save(urls["indexer"], "bob", "src/bobs.py")
        before = await Grants(worker, ttl_s=0).authorize("alice", "api")  # as the completion role reads it

        removed = _users(home, admin, "remove", "alice")
        assert removed.returncode == 0, removed.stderr
        assert _users(home, admin, "add", "alice", "--repos", "api").returncode == 0
        assert _owned(superuser, "alice") == (0, 0)  # the new alice sees none of the old one's saves
        assert _owned(superuser, "bob") == (1, 1)  # and nobody else lost theirs
        assert "1 saved file(s)" in removed.stdout

        after = await Grants(worker, ttl_s=0).authorize("alice", "api")
        assert (after.user, after.repositories) == (before.user, before.repositories)
        assert after.kv_owner != before.kv_owner and after.kv_owner is not None
        request = CompletionRequest(repository="api", path="src/app.py", text="x", line=0, column=1)
        on = {"prefix_cache": True}
        # the engine's pool and disk tier are keyed by this: the old account's KV is never restored for the new one
        assert prompt.cache_key("m", request, on, after.kv_owner) != prompt.cache_key("m", request, on, before.kv_owner)
