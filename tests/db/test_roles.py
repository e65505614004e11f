"""Each service's PostgreSQL role can do its job and nothing more (a real PostgreSQL with pgvector)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from ctxpress import deployment
from ctxpress_core.settings import Settings
from db import team as store
from db.session import engine_for
from tests.team_services import embedded_postgres

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("roles")
    with embedded_postgres(root / "pg") as superuser:
        settings = Settings(home=root / "home", database_url=superuser)
        written = deployment.roles(settings)
        assert {p.name for p in written} == {"completion.url", "indexer.url", "admin.url"}
        yield {p.stem: p.read_text().strip() for p in written} | {"superuser": superuser, "home": str(root / "home")}


def refused(url: str, statement: str) -> bool:
    try:
        with engine_for(url).begin() as conn:
            conn.execute(text(statement))
    except ProgrammingError as exc:
        return "permission denied" in str(exc) or "must be owner" in str(exc)
    return False


def test_files_are_private_and_kept_on_a_second_run(urls: dict[str, str]) -> None:
    settings = Settings(home=Path(urls["home"]), database_url=urls["superuser"])
    first = {p.name: p.read_text() for p in deployment.roles(settings)}
    second = {p.name: p.read_text() for p in deployment.roles(settings)}
    assert first == second  # passwords kept: running it again after an upgrade breaks no service
    for name in first:
        assert (deployment.database_url_path(settings, name.removesuffix(".url")).stat().st_mode & 0o077) == 0
    with engine_for(second["completion.url"].strip()).connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar_one() == "ctxpress_completion"


def test_the_completion_role_reads_the_index_and_appends_telemetry_only(urls: dict[str, str]) -> None:
    url = urls["completion"]
    with engine_for(url).begin() as conn:
        conn.execute(text("SELECT count(*) FROM code_chunks"))
        conn.execute(text("SELECT repository FROM team_grants"))
        conn.execute(text("INSERT INTO completion_feedback (completion_id, action) VALUES ('c1', 'shown')"))
        conn.execute(text("INSERT INTO completion_events (request_id, repository, path, mode, outcome) "
                          "VALUES ('r1', 'repo', 'a.py', 'optimized', 'ok')"))
    assert refused(url, "SELECT password_hash FROM team_users")
    assert refused(url, "DELETE FROM code_chunks")
    assert refused(url, "UPDATE code_chunks SET content = ''")
    assert refused(url, "INSERT INTO team_grants (user_name, repository) VALUES ('x', 'y')")
    assert refused(url, "SELECT * FROM completion_events")  # other people's telemetry is the admin's to read
    assert refused(url, "CREATE TABLE mine (x int)")


def test_the_index_role_writes_the_index_and_reads_grants_only(urls: dict[str, str]) -> None:
    url = urls["indexer"]
    with engine_for(url).begin() as conn:
        repo = conn.execute(text("INSERT INTO repositories (name) VALUES ('repo') RETURNING id")).scalar_one()
        conn.execute(text("INSERT INTO indexed_files (repo_id, path) VALUES (:r, 'a.py')"), {"r": repo})
        conn.execute(text("UPDATE indexed_files SET chunk_count = 1 WHERE repo_id = :r"), {"r": repo})
        conn.execute(text("DELETE FROM code_chunks WHERE repo_id = :r"), {"r": repo})
        conn.execute(text("SELECT repository FROM team_grants"))
    assert refused(url, "SELECT password_hash FROM team_users")
    assert refused(url, "INSERT INTO completion_events (request_id, repository, path, mode, outcome) "
                        "VALUES ('r1', 'repo', 'a.py', 'optimized', 'ok')")
    assert refused(url, "UPDATE team_grants SET repository = 'all'")
    assert refused(url, "DROP TABLE code_chunks")


def test_the_admin_role_manages_users_but_is_no_superuser(urls: dict[str, str]) -> None:
    url = urls["admin"]
    store.add_user(url, "alice", "$2a$04$" + "x" * 53, ["repo"])
    assert store.grants_of(url, "alice")[0] == frozenset({"repo"})
    with engine_for(url).connect() as conn:
        assert conn.execute(text("SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM pg_roles "
                                 "WHERE rolname = current_user")).scalar_one() is False
    assert refused(url, "CREATE ROLE intruder LOGIN")
    assert refused(url, "ALTER ROLE ctxpress_completion SUPERUSER")


def test_every_table_of_the_schema_is_owned_by_the_admin_role(urls: dict[str, str]) -> None:
    """A table the roles do not list stays the superuser's: the admin (the CLI, the console) could not use it."""
    with engine_for(urls["superuser"]).connect() as conn:
        rows = conn.execute(text("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'public'"))
        owners = {str(name): str(owner) for name, owner in rows}
    assert owners and set(owners.values()) == {"ctxpress_admin"}, owners
