"""Cross-file retrieval for mode=optimized: the functions and classes of *other* files that the code
at the cursor most likely needs, ranked, with a report of how they were chosen.

Two levels (design item 9):
1. file level, a coarse filter: files of the same folder, files the current file imports, files
   that import it, and the repository's recently edited files;
2. function level: chunks of those files ranked by vector similarity to the code around the
   cursor fused (reciprocal rank fusion) with lexical matches of the identifiers near the cursor;
   when the coarse files give fewer than K chunks, the whole repository fills the rest.

The similarity threshold adapts (design item 2): when the in-file context already holds the
definitions of every identifier the cursor code uses, only close matches are worth tokens (raise
it); when identifiers near the cursor are defined nowhere in the file (imported, or not imported
yet), retrieval is what can supply them (lower it).

A database that is down or slower than ``timeout_ms`` (30 ms) is skipped for the request: the
caller gets no chunks and a report saying why, the skip is logged and counted in ``SKIPS``, and
the completion goes on with the in-file context. The cursor's own file never comes back.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import text as sql
from sqlalchemy.orm import Session

from ctxpress_core.errors import EmbeddingError
from ctxpress_core.languages import LINE_COMMENT
from ctxpress_core.wire.v1 import wire_lines
from db.chunk_search import SearchHit, search_chunks
from db.coarse_files import CoarseFiles, coarse_files
from db.session import engine_for
from indexer.chunks import identifier_words, import_targets, module_keys
from serving.triton_client import AsyncTritonEmbedder
from syntax.grammars import detect_language, is_supported
from syntax.symbols.model import FileSymbols
from syntax.symbols.references import line_references, references_in_range
from syntax.symbols.table import cheap_symbols, extract_symbols
from syntax.tree_cache import TreeCache

log = logging.getLogger("ctxpress.context.retrieval")

# Skipped retrievals by cause ("db-timeout", "db-error", "embedder", "no-repository"); exported as metrics.
SKIPS: Counter[str] = Counter()

QUERY_LINES_BEFORE = 12  # the query is the code around the cursor: this many lines above ...
QUERY_LINES_AFTER = 2  # ... and below
RAISE_WHEN_RESOLVED = 0.15
LOWER_WHEN_UNRESOLVED = 0.10
EMBED_TIMEOUT_S = 0.25
_BUILTINS = frozenset(dir(builtins))
_PARAM = re.compile(r"[(,]\s*\*{0,2}&?(?:mut\s+)?([A-Za-z_]\w*)")
_WHITESPACE = re.compile(r"\s+")
_ASSIGNED = re.compile(r"(?:^|[\s,(])(?:(?:let|const|var|auto|mut)\s+)?([A-Za-z_]\w*)\s*(?::=|=(?!=)|\bin\b)")


@dataclass
class RetrievedChunk:
    repository: str
    path: str
    symbol: str
    kind: str
    language: str
    start_line: int  # 0-based, inclusive
    end_line: int
    signature: str  # the structured summary
    content: str  # the whole block (a class's summary for classes)
    score: float
    similarity: float | None
    found_by: list[str]
    file_reasons: list[str]  # why its file passed the coarse filter; ["repository"] when it did not


@dataclass
class RetrievalReport:
    elapsed_ms: float = 0.0
    embed_ms: float = 0.0
    db_ms: float = 0.0
    threshold: float = 0.0
    identifiers: list[str] = field(default_factory=list)  # used near the cursor (locals and builtins left out)
    unresolved: list[str] = field(default_factory=list)  # of those, not defined in the in-file context
    coarse_files: int = 0
    coarse_reasons: dict[str, int] = field(default_factory=dict)
    repository_wide: bool = False  # the coarse files gave fewer than K, the repository filled in
    returned: int = 0
    skipped: str | None = None  # why retrieval gave nothing: "db-timeout", "db-error", "embedder", ...


@dataclass
class Retrieval:
    chunks: list[RetrievedChunk]
    report: RetrievalReport


@dataclass
class QueryPlan:
    text: str  # what is embedded
    identifiers: list[str]
    unresolved: list[str]
    imports: list[str]
    module_keys: list[str]


def plan_query(path: str, text: str, line: int, language: str | None,
               in_context_names: Collection[str] | None = None, trees: TreeCache | None = None) -> QueryPlan:
    """The query text, the identifiers near the cursor and which of them the file leaves unresolved.
    ``trees``: the file's parsed versions (its session's), None: parsed for this query alone."""
    lines = wire_lines(text)
    line = max(0, min(line, max(len(lines) - 1, 0)))
    window = "\n".join(lines[max(0, line - QUERY_LINES_BEFORE) : line + QUERY_LINES_AFTER + 1])
    language = language if is_supported(language) else detect_language(path, text)
    if not is_supported(language):
        words = identifier_words(window)
        return QueryPlan(f"{path}\n{window}", words, words, [], [])
    assert language is not None
    # The same version (cursor line parsed blank) as in-file assembly asks for at the same time.
    parsed = (trees if trees is not None else TreeCache()).get(path, text, language, blank_line=line)
    table: FileSymbols = cheap_symbols(parsed) or extract_symbols(parsed)
    start = parsed.line_byte(max(0, line - QUERY_LINES_BEFORE))
    end = parsed.line_end_byte(min(parsed.line_count - 1, line + QUERY_LINES_AFTER))
    refs = references_in_range(parsed, start, end)
    if parsed.blanked_line is not None:
        refs = sorted(refs + line_references(parsed, parsed.blanked_line), key=lambda r: r.byte)
    enclosing = table.enclosing_function(line)
    scope_text = parsed.text(enclosing.start_byte, end) if enclosing else window
    # whitespace runs collapsed first: in a long run the pattern's "\s*" made findall quadratic (one
    # regex call holding the GIL: the worker's event loop froze for minutes on a blank-line run)
    local = set(_ASSIGNED.findall(_WHITESPACE.sub(" ", scope_text)))
    if enclosing is not None:  # parameter names: the first name after "(" or "," (types come after ":")
        local.update(_PARAM.findall(parsed.text(enclosing.decl_start_byte, enclosing.header_end_byte)))
    import_ranges = [(s.start_byte, s.end_byte) for s in table.symbols if s.kind in ("import", "package")]
    defined = {s.name for s in table.symbols if s.kind not in ("import", "package")}
    if in_context_names is not None:
        defined &= set(in_context_names)
    names: list[str] = []
    unresolved: list[str] = []
    for ref in refs:
        name = ref.name
        if any(a <= ref.byte < b for a, b in import_ranges):
            continue  # module names in import statements are not uses
        if name in names or len(name) < 2 or name in _BUILTINS or name in ("self", "this", "cls"):
            continue
        if not ref.is_member and name in local and name not in defined:
            continue
        names.append(name)
        if name not in defined:
            unresolved.append(name)
    imports_text = [parsed.text(s.start_byte, s.end_byte) for s in table.symbols if s.kind in ("import", "package")]
    head = enclosing and parsed.text(enclosing.decl_start_byte, enclosing.header_end_byte).strip()
    query = f"{path}\n{head + chr(10) if head else ''}{window}"
    return QueryPlan(query, names, unresolved, import_targets(path, language, imports_text),
                     module_keys(path, language))


def adaptive_threshold(base: float, identifiers: Sequence[str], unresolved: Sequence[str]) -> float:
    if not identifiers:
        return base
    share = len(unresolved) / len(identifiers)
    if share == 0:
        return base + RAISE_WHEN_RESOLVED  # the file already explains the cursor code
    if share >= 0.5:
        return base - LOWER_WHEN_UNRESOLVED  # the cursor code leans on things defined elsewhere
    return base


class Retriever:
    """One per worker: an embedder client, the database, and a small thread pool of its own so a hung
    database can never take the worker's other executor threads."""

    def __init__(self, database_url: str, embedder: AsyncTritonEmbedder, *, timeout_ms: float = 30.0,
                 top_k: int = 6, min_similarity: float = 0.30) -> None:
        self.database_url = database_url
        self.embedder = embedder
        self.timeout_ms = timeout_ms
        self.top_k = top_k
        self.min_similarity = min_similarity
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="retrieval-db")
        self._last_warning: dict[str, float] = {}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def retrieve(
        self,
        *,
        repositories: Sequence[str],
        path: str,
        text: str,
        line: int,
        language: str | None = None,
        in_context_names: Collection[str] | None = None,
        top_k: int | None = None,
        trees: TreeCache | None = None,
        viewer: str | None = None,
    ) -> Retrieval:
        """Ranked chunks from other files of ``repositories`` (the ones the caller may read), as ``viewer`` (the
        team user asking; None: the shared index only) sees them. ``trees``: the cursor file's parsed versions,
        shared with its in-file assembly (see plan_query)."""
        started = time.perf_counter()
        report = RetrievalReport()
        k = top_k or self.top_k
        if not repositories:
            return self._skip(report, started, "no-repository", "no readable repository")
        loop = asyncio.get_running_loop()
        plan = await loop.run_in_executor(None, plan_query, path, text, line, language, in_context_names, trees)
        report.identifiers, report.unresolved = plan.identifiers, plan.unresolved
        report.threshold = adaptive_threshold(self.min_similarity, plan.identifiers, plan.unresolved)
        t = time.perf_counter()
        vector: np.ndarray | None = None
        try:
            vector = (await self.embedder.embed([plan.text], timeout_s=EMBED_TIMEOUT_S))[0]
        except EmbeddingError as exc:
            SKIPS["embedder"] += 1  # lexical side only
            self._warn("embedder", f"retrieval without vectors: {exc}")
        report.embed_ms = (time.perf_counter() - t) * 1000
        # Unresolved identifiers first: they are what another file has to define.
        words = identifier_words(" ".join(plan.unresolved)) + identifier_words(" ".join(plan.identifiers))
        t = time.perf_counter()
        future = loop.run_in_executor(self._pool, self._query, list(repositories), path, plan, vector, words,
                                      report.threshold, k, viewer)
        try:
            coarse, hits, wide = await asyncio.wait_for(future, timeout=self.timeout_ms / 1000)
        except TimeoutError:
            return self._skip(report, started, "db-timeout", f"database slower than {self.timeout_ms:.0f} ms")
        except Exception as exc:
            return self._skip(report, started, "db-error", f"database error: {type(exc).__name__}: {exc}")
        report.db_ms = (time.perf_counter() - t) * 1000
        report.coarse_files = len(coarse.reasons)
        report.coarse_reasons = dict(Counter(r for rs in coarse.reasons.values() for r in rs))
        report.repository_wide = wide
        chunks = [RetrievedChunk(
            repository=h.repository, path=h.path, symbol=h.symbol, kind=h.kind, language=h.language,
            start_line=h.start_line, end_line=h.end_line, signature=h.signature, content=h.content, score=h.score,
            similarity=h.similarity, found_by=h.found_by, file_reasons=coarse.reasons.get(h.path, ["repository"]),
        ) for h in hits]
        report.returned = len(chunks)
        report.elapsed_ms = (time.perf_counter() - started) * 1000
        return Retrieval(chunks, report)

    def _query(self, repositories: list[str], path: str, plan: QueryPlan, vector: np.ndarray | None,
               words: list[str], threshold: float, k: int,
               viewer: str | None) -> tuple[CoarseFiles, list[SearchHit], bool]:
        with Session(engine_for(self.database_url)) as session, session.begin():
            # The server-side guard: a query still running past the budget is cancelled there too.
            session.execute(sql(f"SET LOCAL statement_timeout = {max(1, int(self.timeout_ms * 2))}"))
            coarse = coarse_files(session, repositories, path=path, imports=plan.imports,
                                  module_keys=plan.module_keys, viewer=viewer)
            hits: list[SearchHit] = []
            if coarse.paths:
                hits = search_chunks(session, repositories, query_vector=vector, words=words, k=k,
                                     paths=coarse.paths, exclude_paths=[path], min_similarity=threshold,
                                     viewer=viewer)
            wide = False
            if len(hits) < k:
                wide = True
                seen = {(h.path, h.symbol) for h in hits}
                more = search_chunks(session, repositories, query_vector=vector, words=words, k=k,
                                     exclude_paths=[path], min_similarity=threshold, viewer=viewer)
                hits += [h for h in more if (h.path, h.symbol) not in seen][: k - len(hits)]
            return coarse, hits, wide

    def _skip(self, report: RetrievalReport, started: float, cause: str, message: str) -> Retrieval:
        SKIPS[cause] += 1
        self._warn(cause, f"retrieval skipped: {message}")
        report.skipped = cause
        report.elapsed_ms = (time.perf_counter() - started) * 1000
        return Retrieval([], report)

    def _warn(self, cause: str, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning.get(cause, 0.0) > 10.0:  # one line per cause per 10 s, the counter has the rest
            self._last_warning[cause] = now
            log.warning("%s (%d so far)", message, SKIPS[cause])


@dataclass
class RenderedChunk:
    chunk: RetrievedChunk
    form: str  # "summary" | "whole"
    tokens: int


def render_retrieved(chunks: Sequence[RetrievedChunk], budget_tokens: int, count_tokens: Callable[[str], int],
                     language: str | None) -> tuple[str, list[RenderedChunk]]:
    """The retrieved chunks as one excerpt block for the prompt, placed after the in-file blocks.

    Summaries first, in rank order, as long as they fit; then, best first, a summary is replaced by
    the whole body when the budget still allows. Each excerpt is headed by a comment naming its file
    and lines, in the cursor file's comment syntax.
    """
    comment = LINE_COMMENT.get(language or "", "#")

    def header(c: RetrievedChunk) -> str:
        return f"{comment} {c.path}:{c.start_line + 1}-{c.end_line + 1}\n"

    chosen: list[RenderedChunk] = []
    used = 0
    for c in chunks:
        piece = header(c) + c.signature
        n = count_tokens(piece)
        if used + n <= budget_tokens:
            chosen.append(RenderedChunk(c, "summary", n))
            used += n
    for item in chosen:
        c = item.chunk
        if c.kind in ("class", "struct", "interface", "trait", "impl", "enum", "record", "union"):
            continue  # a class chunk is its summary already
        whole = header(c) + c.content
        n = count_tokens(whole)
        if used - item.tokens + n <= budget_tokens:
            used += n - item.tokens
            item.form, item.tokens = "whole", n
    text = "".join(
        header(i.chunk) + (i.chunk.content if i.form == "whole" else i.chunk.signature).rstrip("\n") + "\n"
        for i in chosen
    )
    return text, chosen
