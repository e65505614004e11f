"""Secrets in file content, found with ``detect-secrets``: a chunk that holds one is not indexed.

``indexer.filters`` keeps out files that are secrets by name (``.env``, keys, certificates). A secret pasted into
ordinary code (an AWS key, a private key block, ``password = "…"``) would otherwise be embedded, stored in
PostgreSQL and retrieved into the prompts of every developer with a grant for the repository. ``detect-secrets``
(Yelp's maintained detector: provider key formats, private keys, keyword assignments, high-entropy strings) scans
each file once; the chunks whose stored text contains a detected value are dropped before embedding. The values
stay in this function's memory: what is reported is the chunk, the line and the kind of secret.

CPU per file is bounded: only files up to ``MAX_SCAN_BYTES`` are scanned (the indexer takes none larger); only
lines that could hold a secret reach the detector (a keyword, or a token of 16+ characters with a digit in it),
and of a long line only the pieces around such spots, in windows of ``WINDOW_CHARS`` (some of the detector's
expressions cost the square of the length of what they are given); at most ``MAX_SCANNED_CHARS`` of a file
reach it (a file with more is not indexed). The scan runs where indexing runs: in the CLI's thread, and in an
executor thread of the index worker, never on its event loop.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from ctxpress_core.errors import CtxpressError
from indexer.chunks import Chunk
from indexer.filters import DEFAULT_MAX_FILE_BYTES

MAX_SCAN_BYTES = DEFAULT_MAX_FILE_BYTES
# What the detector may be given of one file (a few seconds of one core); a file with more secret-like text
# than this is a data blob rather than code, and is kept out of the index whole.
MAX_SCANNED_CHARS = 256 * 1024
WINDOW_CHARS = 400  # of a longer line, pieces this long are scanned...
WINDOW_OVERLAP = 120  # ...around each spot and overlapping by this much: a secret this long is whole in one
_KEYWORD = re.compile(r"pass|pwd|secret|token|key|auth|cred|private|begin", re.IGNORECASE)
_TOKEN = re.compile(r"[A-Za-z0-9+/=_\-.~]{16,}")
_configure_lock = threading.Lock()
_configured = False


class TooLargeToScan(CtxpressError, ValueError):
    pass


@dataclass(frozen=True)
class Finding:
    """Where a secret is and what kind it is; never its value."""

    line: int  # 0-based
    kind: str  # detect-secrets' type, e.g. "AWS Access Key"


def _configure() -> None:
    """Every plugin of detect-secrets with its default filters, once per process (its settings are global)."""
    global _configured
    with _configure_lock:
        if _configured:
            return
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.settings import cache_bust, configure_settings_from_baseline

        cache_bust()
        configure_settings_from_baseline({"plugins_used": [
            {"name": plugin.__name__} for plugin in get_mapping_from_secret_type_to_class().values()]})
        _configured = True


def _spots(line: str) -> list[tuple[int, int]]:
    """Where in ``line`` a secret may be: keywords, and tokens of 16+ characters with a digit in them."""
    spots = [m.span() for m in _KEYWORD.finditer(line)]
    spots += [m.span() for m in _TOKEN.finditer(line) if any(c.isdigit() for c in m.group())]
    return sorted(spots)


def _windows(line: str, spots: list[tuple[int, int]]) -> Iterator[str]:
    """Pieces of a long line around its spots, each at most ``WINDOW_CHARS`` (merged where they overlap)."""
    reach = WINDOW_OVERLAP
    start, end = -1, -1
    for a, b in spots:
        a, b = max(0, a - reach), min(len(line), b + reach)
        if start >= 0 and a <= end:
            end = max(end, b)
            continue
        if start >= 0:
            yield from _cut(line[start:end])
        start, end = a, b
    if start >= 0:
        yield from _cut(line[start:end])


def _cut(piece: str) -> Iterator[str]:
    if len(piece) <= WINDOW_CHARS:
        yield piece
        return
    for start in range(0, len(piece) - WINDOW_OVERLAP, WINDOW_CHARS - WINDOW_OVERLAP):
        yield piece[start:start + WINDOW_CHARS]


def _candidates(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of the lines, or pieces of long lines, that may hold a secret."""
    for number, line in enumerate(text.splitlines(), 1):
        spots = _spots(line)
        if not spots:
            continue
        if len(line) <= WINDOW_CHARS:
            yield number, line
        else:
            for piece in _windows(line, spots):
                yield number, piece


def scan(path: str, text: str) -> list[tuple[Finding, str]]:
    """Every secret in ``text`` (``path`` tells the detector the file's type) with its value."""
    if len(text.encode("utf-8")) > MAX_SCAN_BYTES:
        raise TooLargeToScan(f"over {MAX_SCAN_BYTES} bytes")
    _configure()
    # The detector's per-line entry point; its public ones read files from disk or scan one line.
    from detect_secrets.core.scan import _process_line_based_plugins

    lines = list(_candidates(text))
    if sum(len(line) for _, line in lines) > MAX_SCANNED_CHARS:
        raise TooLargeToScan(f"over {MAX_SCANNED_CHARS} characters of secret-like text")
    if not lines:
        return []
    return [(Finding(secret.line_number - 1, secret.type), secret.secret_value or "")
            for secret in _process_line_based_plugins(lines=lines, filename=path)]


def _holds(chunk: Chunk, value: str) -> bool:
    return bool(value) and (value in chunk.content or value in chunk.signature)


def drop_secret_chunks(path: str, text: str, chunks: list[Chunk]) -> tuple[list[Chunk], list[str]]:
    """The chunks that hold no secret, and one line per chunk held back (``path:symbol: kind, line N``)."""
    found = scan(path, text)
    if not found:
        return chunks, []
    kept: list[Chunk] = []
    held: list[str] = []
    for chunk in chunks:
        kinds = sorted({f"{finding.kind}, line {finding.line + 1}" for finding, value in found
                        if _holds(chunk, value) or (not value and chunk.start_line <= finding.line <= chunk.end_line)})
        if kinds:
            held.append(f"{path}:{chunk.symbol}: {'; '.join(kinds)}")
        else:
            kept.append(chunk)
    return kept, held
