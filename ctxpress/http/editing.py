"""What every door turns its peer's request into: the document, the cursor, where the file is,
and the ``CompletionRequest`` asked of the appliance.

The peers send the text around the cursor rather than a file: the document is ``before + after``
and the cursor sits between them (line and column in characters, as the wire counts them). The
llama.cpp plugins and Continue send no file path: headers or settings say where the file is.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from aiohttp import web

from ctxpress.http.replies import HttpError
from ctxpress_core.languages import language_from_editor, language_from_path
from ctxpress_core.repository_name import name_from_url
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import MAX_DECODE_MS, MAX_TOKENS_LIMIT, CompletionRequest

REPOSITORY_HEADER = "X-Ctxpress-Repository"
PATH_HEADER = "X-Ctxpress-Path"
LANGUAGE_HEADER = "X-Ctxpress-Language"
# room in the appliance's request limit for the request's other fields
_ENVELOPE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Where:
    repository: str
    path: str
    language: str | None


def where_from(request: web.Request, settings: Settings, *, path: str | None = None, repository: str | None = None,
               editor_language: str | None = None) -> Where:
    """The file's repository, path and language: the peer's own fields where it sends them, else the
    ``X-Ctxpress-*`` headers, else the ``CTXPRESS_HTTP_*`` settings."""
    repository = request.headers.get(REPOSITORY_HEADER) or repository or settings.http_repository
    path = request.headers.get(PATH_HEADER) or path or settings.http_path
    if not 0 < len(repository) <= 256:
        raise HttpError(400, f"{REPOSITORY_HEADER}: 1 to 256 characters")
    if not 0 < len(path) <= 4096:
        raise HttpError(400, f"{PATH_HEADER}: 1 to 4,096 characters")
    named = request.headers.get(LANGUAGE_HEADER) or editor_language or settings.http_language
    language = language_from_editor(named) if named else None
    if named and language is None and request.headers.get(LANGUAGE_HEADER):
        raise HttpError(400, f"{LANGUAGE_HEADER}: unknown language {named!r}")
    return Where(repository, path, language or language_from_path(path))


def repository_from_git_url(url: str | None) -> str | None:
    """Tabby's ``git_url`` (its workspace's origin) → the repository, as ``ctxpress index`` names a clone without
    ``ctxpress.repository`` set (``ctxpress_core.repository_name``)."""
    return name_from_url(url)


@dataclass(frozen=True)
class Cursor:
    text: str
    line: int
    column: int


def cursor_between(before: str, after: str, settings: Settings) -> Cursor:
    text = before + after
    size = len(text.encode("utf-8", errors="surrogatepass"))
    limit = settings.max_request_bytes - _ENVELOPE_BYTES
    if size > limit:
        raise HttpError(413, f"the document is {size:,} bytes; the appliance takes documents up to {limit:,}")
    return Cursor(text, before.count("\n"), len(before) - (before.rfind("\n") + 1))


def max_tokens(asked: int | None, settings: Settings) -> int:
    """The peer's token limit within the wire's; none (or llama.cpp's -1, "no limit"): the default."""
    if asked is None or asked <= 0:
        return settings.default_max_tokens
    return min(asked, MAX_TOKENS_LIMIT)


def max_decode_ms(asked: int | None) -> int | None:
    """llama.cpp's ``t_max_predict_ms`` as the wire's ``max_decode_ms``: 0 or less is no limit there too."""
    return min(asked, MAX_DECODE_MS) if asked is not None and asked > 0 else None


def completion_request(where: Where, cursor: Cursor, tokens: int, scenario: str, timeout_ms: int,
                       max_decode_ms: int | None = None) -> CompletionRequest:
    return CompletionRequest(repository=where.repository, path=where.path, text=cursor.text, line=cursor.line,
                             column=cursor.column, language=where.language, max_tokens=tokens,
                             request_id=uuid.uuid4().hex, timeout_ms=timeout_ms, scenario=scenario,
                             max_decode_ms=max_decode_ms)


def cut_at_stop(text: str, stop: list[str] | str | None) -> tuple[str, bool]:
    """The completion up to the first stop string the peer asked for, and whether one was found."""
    words = [stop] if isinstance(stop, str) else (stop or [])
    cuts = [i for i in (text.find(w) for w in words if w) if i >= 0]
    return (text[:min(cuts)], True) if cuts else (text, False)
