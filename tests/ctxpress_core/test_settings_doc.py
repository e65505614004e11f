"""docs/settings.md is what ctxpress_core.settings_doc writes from the code, and the README names real settings."""

from __future__ import annotations

import re
from pathlib import Path

from ctxpress_core.settings import Settings
from ctxpress_core.settings_doc import DOC_PATH, REGENERATE, SECRET, field_comments, render, undescribed

ROOT = Path(__file__).resolve().parents[2]


def test_docs_settings_md_is_what_the_generator_writes() -> None:
    current = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.exists() else ""
    assert current == render(), f"docs/settings.md is out of date: run `{REGENERATE}` and commit it"


def test_every_setting_has_a_row() -> None:
    text = render()
    for name in Settings.model_fields:
        assert f"| `CTXPRESS_{name.upper()}` |" in text


def test_every_setting_has_a_description() -> None:
    assert undescribed() == [], "describe these in ctxpress_core/settings.py (a comment on or above the field)"
    rows = [line for line in render().splitlines() if line.startswith("| `CTXPRESS_")]
    assert rows and not [row for row in rows if row.endswith("|  |")]


def test_secrets_defaults_are_never_printed() -> None:
    rows = {line.split(" | ")[0].strip("| `"): line for line in render().splitlines() if line.startswith("| `")}
    for name in ("cache_salt_secret", "http_token", "http_token_file", "database_url", "database_url_file"):
        assert rows[f"CTXPRESS_{name.upper()}"].split(" | ")[2] == SECRET
    assert rows["CTXPRESS_CONTEXT_BUDGET_TOKENS"].split(" | ")[2] == "`1024`"


def test_descriptions_come_from_trailing_comments_then_the_block_above() -> None:
    source = (
        "class Settings:\n"
        "    a: int = 1  # trailing\n"
        "    # above, first line\n"
        "    # and the second\n"
        "    b: str = 'x'\n"
        "\n"
        "    c: int = (\n"
        "        3  # inside a field spanning lines\n"
        "    )\n"
        "    d: int = 4\n"
    )
    assert field_comments(source) == {
        "a": "trailing",
        "b": "above, first line and the second",
        "c": "inside a field spanning lines",
        "d": "",
    }


def test_the_readme_table_names_only_real_settings() -> None:
    known = {f"CTXPRESS_{name.upper()}" for name in Settings.model_fields}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| `CTXPRESS_")]
    assert rows, "the README's settings table is gone"
    named = {name for row in rows for name in re.findall(r"CTXPRESS_[A-Z0-9_]+", row)}
    assert named <= known, f"not settings: {sorted(named - known)}"
