"""The console's pure security logic: admin passwords, CSRF tokens, the sign-in rate limit, one-time downloads,
form validation and the escaping of chart labels."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxpress.console import auth, charts
from ctxpress.console.downloads import OneTimeDownloads
from ctxpress.members import repositories


def test_a_password_checks_against_its_hash_and_no_other() -> None:
    hashed = auth.hash_password("correct horse battery")
    assert hashed.startswith("$2b$12$") and "correct" not in hashed
    assert auth.check_password("correct horse battery", hashed)
    assert not auth.check_password("correct horse batterY", hashed)
    assert not auth.check_password("correct horse battery", None)  # an unknown admin never signs in
    assert not auth.check_password("anything at all", "not a bcrypt hash")


def test_new_passwords_are_refused_when_short_or_past_what_bcrypt_reads() -> None:
    with pytest.raises(ValueError, match="at least 12"):
        auth.hash_password("short")
    with pytest.raises(ValueError, match="at most 72"):
        auth.hash_password("x" * 73)
    assert len(auth.new_password()) >= auth.MIN_PASSWORD_CHARS


def test_csrf_wants_the_sessions_own_token() -> None:
    token = auth.new_token()
    assert auth.csrf_ok(token, token)
    assert not auth.csrf_ok(token, None)
    assert not auth.csrf_ok(token, "")
    assert not auth.csrf_ok(token, auth.new_token())
    assert not auth.csrf_ok(token, token[:-1])


def test_session_tokens_are_stored_as_hashes() -> None:
    token = auth.new_token()
    assert len(token) >= 43 and auth.token_hash(token) != token and len(auth.token_hash(token)) == 64
    assert auth.token_hash(token) == auth.token_hash(token)


def test_the_rate_limit_stops_a_name_and_address_after_its_failures_until_the_window_passes() -> None:
    now = [1000.0]
    limiter = auth.RateLimiter(failures=5, window_s=300, clock=lambda: now[0])
    for _ in range(4):
        limiter.failed("lead|10.0.0.9")
    assert limiter.wait_s("lead|10.0.0.9") == 0
    limiter.failed("lead|10.0.0.9")
    assert limiter.wait_s("lead|10.0.0.9") == 300
    assert limiter.wait_s("lead|10.0.0.8") == 0  # another address is not held back
    now[0] += 299
    assert limiter.wait_s("lead|10.0.0.9") == pytest.approx(1)
    now[0] += 1
    assert limiter.wait_s("lead|10.0.0.9") == 0


def test_a_success_forgets_the_failures_and_memory_stays_bounded() -> None:
    limiter = auth.RateLimiter(failures=2, window_s=60, clock=lambda: 0.0, max_keys=3)
    limiter.failed("a")
    limiter.succeeded("a")
    limiter.failed("a")
    assert limiter.wait_s("a") == 0
    for key in ("b", "c", "d", "e"):
        limiter.failed(key)
    assert len(limiter._seen) == 3


def test_a_credentials_file_is_offered_once_to_its_admin_only_and_expires() -> None:
    now = [0.0]
    downloads = OneTimeDownloads(ttl_s=600, clock=lambda: now[0])
    token = downloads.offer("lead", "alice.json", "SECRET")
    assert downloads.take(token, "other-admin") is None
    offer = downloads.take(token, "lead")
    assert offer is not None and offer.text == "SECRET"
    assert downloads.take(token, "lead") is None  # once
    late = downloads.offer("lead", "bob.json", "SECRET2")
    now[0] += 601
    assert downloads.take(late, "lead") is None


def test_repository_lists_are_validated_with_a_reason() -> None:
    assert repositories(" a, b ,,") == ["a", "b"]
    with pytest.raises(ValueError, match="at least one"):
        repositories(" , ")
    with pytest.raises(ValueError, match="at most 256"):
        repositories("x" * 257)


def test_chart_labels_are_escaped() -> None:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    svg = str(charts.bars("<script>x</script>", [at], [("a&b<", [3.0])]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "a&amp;b&lt;" in svg
    assert "<polyline" in str(charts.line("p95", [at, at], [1.0, None], " ms"))
