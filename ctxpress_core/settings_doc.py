"""docs/settings.md, written from the code: every field of ``Settings`` with its type, default and description.

``python -m ctxpress_core.settings_doc`` writes the file; ``--check`` only says whether it is current (exit 1 when
not). tests/ctxpress_core/test_settings_doc.py fails when the file differs from what this writes.

A field's description is its ``Field(description=...)`` when it has one; otherwise the comment on its own lines in
settings.py (a trailing ``# ...``); otherwise the block of comment lines directly above it (no blank line between).
A comment above a group of fields describes the first of them only. The type is the annotation as written. A
secret's default (a SecretStr, or a name saying password, token, secret, credentials or database URL) is never
printed. Every field must have a description: the generator refuses to write (or pass ``--check``) while one has
none.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path
from typing import Any

from ctxpress_core import settings as settings_module
from ctxpress_core.settings import Settings

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
REGENERATE = "python -m ctxpress_core.settings_doc"
SECRET = "(secret)"
# Whole words of the name: "http_token" is a secret, "budget_tokens" is not.
_SECRET_NAME = re.compile(r"(^|_)(password|token|secret|credentials|database_url)(_|$)")


def field_comments(source: str, class_name: str = "Settings") -> dict[str, str]:
    """Each annotated field of ``class_name`` in ``source``: its trailing comment, else the comment block above."""
    comments: dict[int, str] = {}  # line -> comment text (without '#')
    comment_only: set[int] = set()  # lines holding a comment and nothing else
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        line = token.start[0]
        if token.type == tokenize.COMMENT:
            comments[line] = token.string.lstrip("#").strip()
            if line not in code_lines:
                comment_only.add(line)
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            for code_line in range(token.start[0], token.end[0] + 1):
                code_lines.add(code_line)
    tree = ast.parse(source)
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name).body
    described: dict[str, str] = {}
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        end = node.end_lineno or node.lineno
        trailing = [comments[line] for line in range(node.lineno, end + 1) if line in comments and line in code_lines]
        if trailing:
            described[node.target.id] = " ".join(trailing)
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in comment_only:
            above.insert(0, comments[line])
            line -= 1
        described[node.target.id] = " ".join(above)
    return described


def field_annotations(source: str, class_name: str = "Settings") -> dict[str, str]:
    tree = ast.parse(source)
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name).body
    return {
        node.target.id: ast.get_source_segment(source, node.annotation) or ""
        for node in body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def is_secret(name: str, annotation: str) -> bool:
    return "SecretStr" in annotation or _SECRET_NAME.search(name) is not None


def render_default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str) and value == "":
        return '`""`'
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _source(source: str | None) -> str:
    return source if source is not None else Path(settings_module.__file__).read_text(encoding="utf-8")


def undescribed(source: str | None = None) -> list[str]:
    """The fields of ``Settings`` with neither a ``Field(description=...)`` nor a comment."""
    comments = field_comments(_source(source))
    return [name for name, field in Settings.model_fields.items() if not (field.description or comments.get(name))]


def render(source: str | None = None) -> str:
    source = _source(source)
    comments = field_comments(source)
    annotations = field_annotations(source)
    lines = [
        "# Settings",
        "",
        f"<!-- Written by `{REGENERATE}` from ctxpress_core/settings.py: do not edit by hand. -->",
        "",
        "Every field of `Settings` (`ctxpress_core/settings.py`) is an environment variable `CTXPRESS_<NAME>`.",
        "The descriptions are the code's comments on each field; a comment above a group of fields describes",
        "the first of them. Secrets' defaults are not shown.",
        "",
        "| variable | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in Settings.model_fields.items():
        annotation = annotations.get(name, "")
        secret = is_secret(name, annotation)
        default = SECRET if secret else render_default(field.get_default(call_default_factory=True))
        description = field.description or comments.get(name, "")
        lines.append(f"| `CTXPRESS_{name.upper()}` | `{_cell(annotation)}` | {_cell(default)} | {_cell(description)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    missing = undescribed()
    if missing:
        print(f"settings without a description (a comment on or above the field): {', '.join(missing)}",
              file=sys.stderr)
        return 1
    text = render()
    if "--check" in args:
        current = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.exists() else ""
        if current != text:
            print(f"{DOC_PATH} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    DOC_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
