"""The team console in a real browser (Debian's Chromium driven by Playwright): a lead signs in, adds a member and
downloads their file once, grants a repository, sees that member's completions and acceptance rate, rotates them
(the old file no longer logs in to NATS), retries a dead letter; and the session and CSRF protections refuse what
they must. Screenshots of each page go to .e2e/artifacts/console-<page>.png."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, sync_playwright

from ctxpress.dead_letters import queue
from ctxpress.topology import free_ports
from ctxpress_core import identity, nats_connect
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import HEADER_DEAD_DELIVERIES, HEADER_DEAD_ERROR, HEADER_DEAD_SUBJECT
from db import team as team_store
from indexer.stream import dead_letter_subject, ensure_stream
from tests.e2e.console_services import cli, console_process, nats_login, run_async, scripted_worker
from tests.e2e.vscode_driver import CHROMIUM
from tests.team_services import embedded_postgres, team_nats, team_settings

PASSWORD = "a lead's long passphrase"
TEXT = "def add(a, b):\n    return \n\n\ndef sub(a, b):\n    return a - b\n"


def _shot(page: Page, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"console-{name}.png"), full_page=True)


def _download(page: Page, path: Path) -> identity.NatsCredentials:
    with page.expect_download() as download:
        page.click("#download button")
    download.value.save_as(path)
    return identity.load_credentials(path)


async def _complete_and_feedback(credentials: identity.NatsCredentials, accept: int, n: int) -> list[dict]:
    """``n`` completions as that member, each reported shown, the first ``accept`` accepted."""
    nc = await nats_connect.connect(credentials.nats_url, plaintext_credentials=credentials.plaintext,
                                    **credentials.connect_options())
    replies = []
    try:
        for i in range(n):
            body = {"repository": "demo", "path": f"m{i}.py", "text": TEXT, "line": 1, "column": 11,
                    "language": "python", "max_tokens": 16}
            reply = json.loads((await nc.request(credentials.subject("complete"), json.dumps(body).encode(),
                                                 timeout=60)).data)
            replies.append(reply)
            if "error" in reply:
                continue
            for action in ("shown", "accepted") if i < accept else ("shown", "dismissed"):
                event = {"completion_id": reply["id"], "action": action}
                if action == "accepted":
                    event["chars_kept"] = len(reply["completion"])
                await nc.request(credentials.subject("feedback"), json.dumps(event).encode(), timeout=10)
    finally:
        await nc.close()
    return replies


async def _dead_letter(settings: Settings) -> None:
    """An index event the index worker gave up on, as it leaves one (as the indexer user)."""
    nc = await nats_connect.connect(settings.nats_servers(), plaintext_credentials=not settings.nats_tls,
                                    **identity.service_connect_options(settings, identity.INDEXER_USER))
    try:
        js = nc.jetstream()
        await ensure_stream(js, settings)
        event = {"repository": "demo", "path": "pkg/m.py", "text": "x = 1\n"}
        await js.publish(dead_letter_subject(settings), json.dumps(event).encode(), headers={
            HEADER_DEAD_SUBJECT: identity.user_subject("alice", "file_saved"),
            HEADER_DEAD_ERROR: "embedder unavailable: connection refused", HEADER_DEAD_DELIVERIES: "20"})
    finally:
        await nc.close()


def _session_cookie(context: BrowserContext) -> dict:
    return next(c for c in context.cookies() if c["name"] == "ctxpress_console")


def test_a_lead_runs_the_team_from_the_console(tmp_path: Path, artifacts: Path) -> None:
    with embedded_postgres(tmp_path / "pg") as url:
        settings = team_settings(tmp_path / "home", url, console_port=free_ports(1)[0])
        with team_nats(settings), scripted_worker(settings), \
                console_process(settings, tmp_path / "console.log") as base:
            made = cli(settings, "users", "admin", "lead", "--password-stdin", stdin=PASSWORD + "\n")
            assert made.returncode == 0, made.stderr
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
                try:
                    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
                    page = context.new_page()
                    _walk_through(page, context, base, settings, tmp_path, artifacts)
                    _protections(playwright, page, context, base, settings)
                finally:
                    browser.close()


def _walk_through(page: Page, context: BrowserContext, base: str, settings: Settings, tmp_path: Path,
                  artifacts: Path) -> None:
    page.goto(f"{base}/members")
    assert page.url == f"{base}/login"  # no session: the sign-in page
    page.fill("input[name=name]", "lead")
    page.fill("input[name=password]", "not the password")
    page.click("button[type=submit]")
    assert "wrong name or password" in page.inner_text("main")
    _shot(page, artifacts, "login")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    assert page.url == f"{base}/"
    cookie = _session_cookie(context)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert "nats" in page.inner_text("main") and "Alerts" in page.inner_text("main")
    _shot(page, artifacts, "overview")

    page.goto(f"{base}/members")
    page.fill("#add-member input[name=name]", "alice")
    page.fill("#add-member input[name=repos]", "demo")
    page.click("#add-member button")
    assert "added developer alice with demo" in page.inner_text("main")
    html = page.content()
    _shot(page, artifacts, "download")
    first = _download(page, tmp_path / "alice.json")
    assert first.password not in html  # the file's secret is only in the download
    assert first.user == "alice" and run_async(lambda: nats_login(first.nats_url, first.connect_options()))
    page.goto(f"{base}/members")
    row = page.locator("#member-alice")
    row.locator("form[action='/members/grant'] input[name=repos]").fill("extra")
    row.locator("form[action='/members/grant'] button").click()
    assert "alice may now use extra" in page.inner_text("main")
    assert "demo, extra" in page.locator("#member-alice").inner_text()
    assert team_store.grants_of(settings.effective_database_url(), "alice")[0] == {"demo", "extra"}

    replies = run_async(lambda: _complete_and_feedback(first, accept=2, n=3))
    assert [r.get("completion") for r in replies] == ["a + b"] * 3, replies
    for _ in range(50):  # the worker writes telemetry in batches, off the request's path: wait for all 3 shown
        page.goto(f"{base}/usage?period=1h&by=member")
        row = page.locator("#groups tr", has_text="alice")
        if row.count() and row.inner_text().split("\t")[2:4] == ["3", "2"]:
            break
        page.wait_for_timeout(200)
    assert page.inner_text("#acceptance") == "66.7%"  # 2 accepted of 3 shown
    alice = page.locator("#groups tr", has_text="alice").inner_text().split("\t")
    assert alice[:5] == ["alice", "3", "3", "2", "66.7%"]
    # the small file is sent whole: its one context source, in all 3 shown and both accepted suggestions
    assert page.inner_text("#sources").splitlines()[1:] == ["file\t3\t2\t66.7%"]
    _shot(page, artifacts, "usage")
    page.goto(f"{base}/members")
    assert "s ago" in page.locator("#member-alice").inner_text()  # last seen: just now
    _shot(page, artifacts, "members")

    page.locator("#member-alice form[action='/members/rotate'] button").click()
    second = _download(page, tmp_path / "alice-2.json")
    assert second.password != first.password
    assert not run_async(lambda: nats_login(first.nats_url, first.connect_options()))  # the old file is refused
    assert run_async(lambda: nats_login(second.nats_url, second.connect_options()))

    run_async(lambda: _dead_letter(settings))
    page.goto(f"{base}/repositories")
    assert "embedder unavailable" in page.inner_text("#dead-1")
    _shot(page, artifacts, "repositories")
    page.locator("#dead-1 form[action='/dead-letters/retry'] button").click()
    assert "dead letter 1 published again on ctxpress.v1.u.alice.file_saved" in page.inner_text("main")
    after = run_async(lambda: queue(settings))
    assert after.dead == [] and after.pending == 1  # back in the index stream, for the index worker
    page.goto(f"{base}/audit")
    audit = page.inner_text("main")
    for action in ("add developer", "grant", "rotate", "retry dead letter", "download credentials", "sign in"):
        assert action in audit
    _shot(page, artifacts, "audit")


def _protections(playwright: object, page: Page, context: BrowserContext, base: str, settings: Settings) -> None:
    url = settings.effective_database_url()
    page.goto(f"{base}/members")
    csrf = page.locator("#add-member input[name=csrf]").get_attribute("value")
    assert csrf
    # with the session cookie but without the form's token, or with another one: refused, nothing done
    no_token = context.request.post(f"{base}/members/add", form={"name": "mallory", "repos": "demo"},
                                    max_redirects=0)
    wrong = context.request.post(f"{base}/members/add", form={"name": "mallory", "repos": "demo",
                                                              "csrf": csrf[::-1]}, max_redirects=0)
    assert (no_token.status, wrong.status) == (403, 403)
    assert "mallory" not in [u.name for u in team_store.list_users(url)]
    # the same form with its token goes through: the refusals above were the token's doing
    good = context.request.post(f"{base}/members/grant", form={"name": "alice", "repos": "third", "csrf": csrf},
                                max_redirects=0)
    assert good.status == 303 and "third" in team_store.grants_of(url, "alice")[0]
    # no cookie: the sign-in page, for pages and forms alike
    stranger = playwright.request.new_context()  # type: ignore[attr-defined]
    assert stranger.get(f"{base}/members", max_redirects=0).headers["location"] == "/login"
    assert stranger.post(f"{base}/members/add", form={"name": "mallory", "repos": "demo", "csrf": csrf},
                         max_redirects=0).status == 403
    # signed out: the old cookie signs nobody in any more
    token = _session_cookie(context)["value"]
    page.click("header form.signout button")
    assert page.url == f"{base}/login"
    replay = playwright.request.new_context(  # type: ignore[attr-defined]
        extra_http_headers={"Cookie": f"ctxpress_console={token}"})
    assert replay.get(f"{base}/members", max_redirects=0).status == 303
