"""Secrets in file content (detect-secrets): a chunk holding one is neither embedded nor stored, and what is
reported names the chunk and the kind of secret, never its value. The scan itself needs no services; the
indexing test runs the real pipeline (Triton's embedder, PostgreSQL) on a temp git repository."""

from __future__ import annotations

import json
import random
import secrets
import string
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import CodeChunk, Repository
from db.session import engine_for
from indexer.chunks import chunk_file
from indexer.pipeline import Indexer
from indexer.secret_scan import MAX_SCAN_BYTES, MAX_SCANNED_CHARS, TooLargeToScan, drop_secret_chunks, scan
from serving.triton_client import TritonEmbedder
from tests.indexer.index_repo import FILES, make_repo

# Made up here, so no detector can know them as published examples; drawn from a fixed seed so every run
# scans the same text (random ones made the test fail now and then: a password starting with "-").
_DRAW = random.Random(20261205)


def _made_up(alphabet: str, length: int) -> str:
    return "".join(_DRAW.choice(alphabet) for _ in range(length))


AWS_KEY = "AKIA" + _made_up(string.ascii_uppercase + string.digits, 16)
API_TOKEN = _made_up("0123456789abcdef", 40)
PRIVATE_KEY_BODY = _made_up(string.ascii_letters + string.digits, 64)
PASSWORD = _made_up(string.ascii_letters + string.digits, 24)

CLIENTS = f'''"""Clients of the outside services."""


def storage_client():
    return connect_storage(access_key="{AWS_KEY}", region="eu-west-1")


def billing_headers() -> dict[str, str]:
    api_key = "{API_TOKEN}"
    return {{"Authorization": f"Bearer {{api_key}}"}}


def signing_key() -> str:
    return """-----BEGIN RSA PRIVATE KEY-----
{PRIVATE_KEY_BODY}
-----END RSA PRIVATE KEY-----"""


def database_login() -> tuple[str, str]:
    password = "{PASSWORD}"
    return ("app", password)


def retry_delays(attempts: int) -> list[float]:
    """Exponential back-off, capped at a minute."""
    return [min(60.0, 0.5 * 2 ** n) for n in range(attempts)]
'''
SECRET_VALUES = (AWS_KEY, API_TOKEN, PRIVATE_KEY_BODY, PASSWORD)
HELD = {"storage_client", "billing_headers", "signing_key", "database_login"}


def test_chunks_holding_a_secret_are_held_back_by_name_and_kind_only() -> None:
    chunks = chunk_file("shop/clients.py", CLIENTS, "python").chunks
    kept, held = drop_secret_chunks("shop/clients.py", CLIENTS, chunks)
    assert {c.symbol for c in kept} == {"retry_delays"}
    assert {line.split(":")[1] for line in held} == HELD
    assert any("AWS Access Key" in line for line in held) and any("Private Key" in line for line in held)
    assert not any(value in line for value in SECRET_VALUES for line in held)


def test_ordinary_code_holds_no_secret() -> None:
    for path, content in FILES.items():
        if path.endswith((".py", ".ts")) and path != "broken.py":
            assert scan(path, content) == [], path


def test_the_scan_is_bounded() -> None:
    # A long line is scanned in windows: a key at its end is still found.
    long_line = "blob = '" + "a" * 200_000 + f"' ; key = '{AWS_KEY}'\n"
    assert [f.kind for f, _ in scan("data.py", long_line)] == ["AWS Access Key"]
    with pytest.raises(TooLargeToScan, match="bytes"):
        scan("huge.py", "x = 1\n" * (MAX_SCAN_BYTES // 6 + 1))
    with pytest.raises(TooLargeToScan, match="secret-like"):  # refused before the detector sees any of it
        scan("blob.py", f"digest = '{API_TOKEN}'\n" * (MAX_SCANNED_CHARS // len(API_TOKEN) + 1))


# --- the real pipeline -------------------------------------------------------------------------------------


def _stored(url: str, repository: str) -> list[tuple[str, str, str]]:
    with Session(engine_for(url)) as session:
        rows = session.execute(select(CodeChunk.path, CodeChunk.symbol, CodeChunk.content)
                               .join(Repository).where(Repository.name == repository))
        return [tuple(r) for r in rows]  # type: ignore[misc]


@pytest.mark.services
def test_indexing_stores_and_embeds_no_chunk_holding_a_secret(appliance: Any, embedder: TritonEmbedder,
                                                              tmp_path: Path) -> None:
    url = appliance.settings.effective_database_url()
    root = make_repo(tmp_path / "repo", {"shop/clients.py": CLIENTS, "shop/__init__.py": ""})
    name = f"secrets-{secrets.token_hex(4)}"
    summary = Indexer(url, embedder).index_repository(root, name)
    stored = _stored(url, name)
    symbols = {symbol for path, symbol, _ in stored if path == "shop/clients.py"}
    assert "retry_delays" in symbols and not symbols & HELD
    assert not any(value in content for value in SECRET_VALUES for _, _, content in stored)
    assert summary.vectors_computed == summary.chunks_written == len(stored)  # nothing held back was embedded
    assert {line.split(":")[1] for line in summary.secret_chunks} == HELD
    report = json.dumps(summary.as_dict())
    assert summary.as_dict()["secret_chunks"] == len(HELD)
    assert not any(value in report for value in SECRET_VALUES)


@pytest.mark.services
def test_ctxpress_index_reports_the_chunks_held_back_without_their_secrets(appliance: Any, tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"shop/clients.py": CLIENTS})
    done = appliance.ctxpress("index", str(root), "--name", f"secrets-cli-{secrets.token_hex(4)}")
    assert done.returncode == 0, done.stderr
    assert f"held back {len(HELD)} chunks holding secrets" in done.stdout
    assert not any(value in done.stdout + done.stderr for value in SECRET_VALUES)
