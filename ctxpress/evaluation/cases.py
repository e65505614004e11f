"""Evaluation cases: a cursor in a real file and the rest of that line as the answer.

``make_cases`` picks cursors inside function bodies at non-trivial lines with tree-sitter
(any language the indexer parses), deterministic for a seed and spread over files.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from syntax.grammars import detect_language, is_supported
from syntax.parsed_file import parse_text
from syntax.symbols.table import extract_symbols

FUNCTION_KINDS = frozenset({"function", "method", "constructor"})
_COMMENT_STARTS = ("#", "//", "/*", "*", "--", '"""', "'''")
_MIN_EXPECTED_CHARS = 3
_MAX_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class Case:
    id: str
    repo: str  # absolute path of the repository root
    path: str  # relative to repo
    line: int  # 0-based
    column: int  # 0-based, characters
    expected: str  # from the cursor to the end of the line

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def read_cases(path: Path) -> list[Case]:
    cases = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            cases.append(Case(**json.loads(raw)))
        except (json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a case: {exc}") from None
    return cases


def cut_out(text: str, line: int, column: int) -> tuple[str, str]:
    """(file as the developer has it, the text removed). The rest of the cursor line is cut,
    its line ending kept: prefix = everything before the cursor, suffix = the end of line on."""
    lines = text.splitlines(keepends=True)
    current = lines[line]
    body = current.rstrip("\r\n")
    ending = current[len(body):]
    removed = body[column:]
    lines[line] = body[:column] + ending
    return "".join(lines), removed


def restore(cut_text: str, line: int, column: int, removed: str) -> str:
    """Inverse of ``cut_out``: gives the original file back byte for byte."""
    lines = cut_text.splitlines(keepends=True)
    current = lines[line]
    body = current.rstrip("\r\n")
    lines[line] = body[:column] + removed + current[len(body):]
    return "".join(lines)


def trivial_line(stripped: str) -> bool:
    if not stripped or stripped.startswith(_COMMENT_STARTS):
        return True
    # a lone bracket (or a few of them with a separator): nothing to predict
    return all(ch in "{}[]()<>;,:" for ch in stripped)


def cursor_columns(line_text: str) -> list[int]:
    """Token boundaries after the indentation that leave something worth predicting."""
    body = line_text.rstrip("\r\n")
    start = len(body) - len(body.lstrip())
    columns = []
    for col in range(start, len(body)):
        at_boundary = col == start or (body[col - 1].isalnum() or body[col - 1] == "_") != (
            body[col].isalnum() or body[col] == "_")
        if at_boundary and len(body[col:].strip()) >= _MIN_EXPECTED_CHARS:
            columns.append(col)
    return columns


def source_files(repo: Path) -> list[Path]:
    """Files git tracks (or every file when ``repo`` is not a git repository's root) that the
    indexer parses."""
    try:
        top = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"], capture_output=True,
                             check=True, timeout=10, text=True).stdout.strip()
        if Path(top).resolve() != repo.resolve():
            raise ValueError("a folder inside another repository: take every file")
        listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True,
                                timeout=60).stdout.decode().split("\0")
        paths = [repo / p for p in listed if p]
    except (subprocess.SubprocessError, OSError, ValueError):
        paths = [Path(root) / name for root, _, names in os.walk(repo) for name in names]
    return sorted(p for p in paths if p.is_file() and is_supported(detect_language(str(p))))


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STRING = re.compile(r"""[rbfuRBFU]{0,2}("[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*')""")  # blanked out
# A cross-file name must be specific enough that the model cannot guess it from the file alone.
_MIN_FOREIGN_NAME = 5
_MAX_DEFINING_FILES = 3


def _table(path: Path) -> tuple[str, object] | None:
    if path.stat().st_size > _MAX_FILE_BYTES:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    language = detect_language(str(path), text)
    assert language is not None
    try:
        return text, extract_symbols(parse_text(text, language, str(path)))
    except Exception:  # a file tree-sitter cannot read is simply not a source of cases
        return None


def defined_names(repo: Path, files: list[Path]) -> dict[str, set[str]]:
    """Name of every top-level function, class and constant -> the files (relative) defining it
    (not methods: an attribute name says little about where its definition lives)."""
    out: dict[str, set[str]] = {}
    for path in files:
        loaded = _table(path)
        if loaded is None:
            continue
        relative = str(path.relative_to(repo))
        for sym in loaded[1].symbols:  # type: ignore[attr-defined]
            if sym.parent is None and sym.kind not in ("import", "package", "field", "variable"):
                out.setdefault(sym.name, set()).add(relative)
    return out


def _foreign_columns(line: str, columns: list[int], relative: str, local: set[str],
                     foreign: dict[str, set[str]]) -> list[int]:
    """Columns before a name defined in another file of the repository (and not in this one),
    so that the text to predict contains it."""
    keep: set[int] = set()
    code = _STRING.sub(lambda m: " " * len(m.group()), line.split("#", 1)[0] if "#" in line and "'" not in line
                       and '"' not in line else line)
    for m in _IDENTIFIER.finditer(code):
        name = m.group()
        if m.start() > 0 and code[m.start() - 1] == ".":
            continue  # an attribute (obj.update): not a reference to a module-level definition
        owners = foreign.get(name)
        if (owners and relative not in owners and name not in local and len(name) >= _MIN_FOREIGN_NAME
                and len(owners) <= _MAX_DEFINING_FILES):
            keep.update(c for c in columns if c <= m.start())
    return sorted(keep)


def _file_candidates(repo: Path, path: Path, min_lines: int, max_lines: int = 0,
                     foreign: dict[str, set[str]] | None = None) -> list[tuple[int, list[int]]]:
    loaded = _table(path)
    if loaded is None:
        return []
    text, table = loaded
    lines = text.splitlines()
    if len(lines) < min_lines or (max_lines and len(lines) > max_lines):
        return []
    relative = str(path.relative_to(repo))
    local = {s.name for s in table.symbols}  # type: ignore[attr-defined]
    source = text.encode("utf-8")
    body_lines: set[int] = set()
    for sym in table.symbols:
        if sym.kind in FUNCTION_KINDS and sym.body_start_byte is not None and sym.end_line > sym.start_line:
            # from the body's first line: a multi-line signature is not the body
            body_start = source.count(b"\n", 0, sym.body_start_byte)
            first = body_start if body_start > sym.start_line else body_start + 1
            body_lines.update(range(first, sym.end_line + 1))
    docstring_lines = _string_lines(lines)
    out = []
    for number in sorted(body_lines):
        if number >= len(lines) or number in docstring_lines or trivial_line(lines[number].strip()):
            continue
        columns = cursor_columns(lines[number])
        if foreign is not None:
            columns = _foreign_columns(lines[number], columns, relative, local, foreign)
        if columns:
            out.append((number, columns))
    return out


def cursor_spots(path: Path) -> list[tuple[int, list[int]]]:
    """Where ``make_cases`` may put a cursor in one file: (line, columns) inside function bodies."""
    return _file_candidates(path.parent, path, 0)


def _string_lines(lines: list[str]) -> set[int]:
    """Lines inside triple-quoted strings (docstrings are prose, not code to complete)."""
    inside, quote, out = False, "", set()
    for number, line in enumerate(lines):
        for q in ('"""', "'''"):
            count = line.count(q)
            if inside and q == quote:
                out.add(number)
                if count % 2 == 1:
                    inside = False
                break
            if not inside and count % 2 == 1:
                inside, quote = True, q
                out.add(number)
                break
    return out


def make_cases(repo: Path, n: int, seed: int, min_lines: int = 0,
               progress: Callable[[int, int], None] | None = None, max_lines: int = 0,
               cross_file: bool = False) -> list[Case]:
    """``n`` cases spread over files: files are visited round-robin in a seeded order, one
    cursor per file per round, so no single file dominates the set. ``cross_file``: only lines
    whose text to predict uses a name defined in another file of the repository (and not in
    this one), the cases retrieval exists for."""
    repo = repo.resolve()
    rng = random.Random(seed)
    files = source_files(repo)
    foreign = defined_names(repo, files) if cross_file else None
    rng.shuffle(files)
    pools: list[tuple[Path, list[tuple[int, list[int]]]]] = []
    for index, path in enumerate(files):
        candidates = _file_candidates(repo, path, min_lines, max_lines, foreign)
        if candidates:
            rng.shuffle(candidates)
            pools.append((path, candidates))
        if progress:
            progress(index + 1, len(files))
    cases: list[Case] = []
    while len(cases) < n and any(pool for _, pool in pools):
        for path, pool in pools:
            if not pool or len(cases) >= n:
                continue
            line, columns = pool.pop()
            column = rng.choice(columns)
            text = path.read_text(encoding="utf-8")
            expected = text.splitlines()[line][column:]
            relative = str(path.relative_to(repo))
            cases.append(Case(f"{relative}:{line}:{column}", str(repo), relative, line, column, expected))
    return cases


def write_cases(cases: Iterable[Case], out: Path) -> None:
    out.write_text("".join(c.to_json() + "\n" for c in cases), encoding="utf-8")


def iter_case_files(cases: Iterable[Case]) -> Iterator[tuple[Case, str]]:
    cache: dict[Path, str] = {}
    for case in cases:
        path = Path(case.repo) / case.path
        if path not in cache:
            cache[path] = path.read_text(encoding="utf-8")
        yield case, cache[path]
