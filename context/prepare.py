"""The in-file context of one request, with its report, and the one place its strategy is chosen
(``in_file_context``): the window around the cursor (``crop`` off: mode=baseline, the feature off, or a file with
lines too long to parse, cut), the whole file when it fits the budget (feature ``whole_file``), else the assembly
(context/assembly/), and the window again when the assembly fails: logged, counted in ``FALLBACK_COUNTS``, and
the request still gets a prompt. CPU-bound: runs in an executor."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from context.assembly import AssemblyFailed, assemble_context
from context.model import AssembledContext
from context.options import DEFAULT_OPTIONS, AssemblyOptions
from context.packing.tokens import TokenCounter, file_tokens, memoized
from context.session import FileSession, FileSessions
from context.sources.whole_file import whole_file_context
from context.sources.window import MAX_LINE_CHARS, baseline_window, clamp_cursor, clip_long_lines, split_at_cursor
from context.warm import warm_file
from ctxpress_core.features import resolve
from ctxpress_core.languages import language_from_path
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, ContextReport
from syntax.grammars import detect_language, is_supported

log = logging.getLogger("ctxpress.context")

# The window sent instead of the assembly, by cause (AssemblyFailed.cause).
FALLBACK_COUNTS: Counter[str] = Counter()


def request_features(request: CompletionRequest) -> dict[str, bool]:
    """The features a request gets: every registered one resolved with its overrides in mode=optimized; none in
    mode=baseline, whatever it asks for (the registry's features are optimized mode's)."""
    return resolve(request.features) if request.mode == "optimized" else {}


@dataclass
class Prepared:
    prefix: str
    suffix: str
    report: ContextReport
    language: str
    digest: str
    features: dict[str, bool]  # request_features: what the request gets, resolved once
    stable_chars: int = 0  # prefix[:stable_chars] changes least: cross-file chunks go after it
    # The in-file excerpts were kept from the previous request (typing in the same block): so are
    # the cross-file chunks after them (see chunks.CrossFileChunks.add).
    steady: bool = False


class ContextPreparer:
    def __init__(self, settings: Settings, count_tokens: Callable[[str], int], sessions: FileSessions) -> None:
        self.settings = settings
        self.count_tokens = count_tokens
        self.sessions = sessions  # the files' parse trees and steady excerpts

    def prepare(self, request: CompletionRequest, text: str, digest: str, *, owner: str | None,
                longest_line: int = 0, features: dict[str, bool] | None = None) -> Prepared:
        """``owner``: whose view of the file it is (the team user; None on the single-user appliance): the session's
        steady excerpts are that user's own. ``longest_line``: the file's, in characters, where the caller knows it
        (over MAX_LINE_CHARS: the window of the file with its long lines cut). ``features``: the request's
        (request_features), where the caller has resolved them."""
        split_at_cursor(text, request.line, request.column)  # CursorOutOfRange: answered cursor_out_of_range
        features = request_features(request) if features is None else features
        default_budget = (self.settings.baseline_budget_tokens if request.mode == "baseline"
                          else self.settings.context_budget_tokens)
        column, long_lines = request.column, longest_line > MAX_LINE_CHARS
        if long_lines:
            # minified or generated code: no parse (every pass over such a line costs in proportion to its length)
            text, column = clip_long_lines(text, request.line, request.column)
            features, default_budget = {}, self.settings.context_budget_tokens
        budget = request.budget_tokens or default_budget
        # settled here once: the warm-up and the assembly are given it rather than working it out again
        language = request.language or language_from_path(request.path, text)
        crop = features.get("crop", False)
        session = self.sessions.get(request.repository, request.path, owner) if crop else None
        if session is not None and not session.parsed():
            # A file's first request, no file_opened before it: its warm-up (the parse, symbols and line counts, in
            # proportion to the file, which the payload limit bounds) is done here, outside the assembly's deadline,
            # which is for the work at each keystroke. Otherwise a long file's first request fell back to the window
            # every time, and the prompt of its next request shared nothing with it.
            warm_file(session, text, language, count_tokens=self.count_tokens)
        options = (AssemblyOptions.with_features(features, budget_tokens=budget, language=language,
                                                 timeout_ms=self.settings.assembly_timeout_ms,
                                                 recent_edit_lines=request.recent_edits or ())
                   if crop else AssemblyOptions(budget_tokens=budget, language=language))
        ctx = in_file_context(text, request.path, request.line, column, count_tokens=self.count_tokens,
                              options=options, crop=crop, session=session, window_lines=self.settings.window_lines)
        window = ctx.window
        report = ContextReport(
            strategy=ctx.strategy, sources=sorted({b.kind for b in ctx.blocks}) or ["window"],
            file_tokens=0,  # the worker counts the file while the engine works
            context_tokens=ctx.context_tokens, budget_tokens=budget,
            window_start_line=window and window.start_line, window_end_line=window and window.end_line,
            truncated=bool(window and window.truncated),
            degraded=(f"long lines: a line of {longest_line:,} characters (over {MAX_LINE_CHARS:,})" if long_lines
                      else ctx.fallback_reason),
            blocks=[b.to_report() for b in ctx.blocks], dropped=[b.to_report() for b in ctx.dropped])
        return Prepared(ctx.prefix, ctx.suffix, report, language, digest, features, stable_chars=ctx.stable_chars,
                        steady=ctx.steady)


def in_file_context(text: str, path: str, line: int, column: int, *, count_tokens: TokenCounter,
                    options: AssemblyOptions = DEFAULT_OPTIONS, crop: bool = True, session: FileSession | None = None,
                    window_lines: int = 200) -> AssembledContext:
    """The in-file context for a cursor at 0-based (line, column) of ``text``, within ``options.budget_tokens``:
    the window unless ``crop``, else the whole file, the assembly, or the window when that fails. ``window_lines``:
    the window's lines either side of the cursor (the settings' window_lines)."""
    t0 = time.perf_counter()
    lang = options.language or detect_language(path, text)
    count_tokens = memoized(count_tokens)
    ctx = None if crop else _window(text, line, column, count_tokens, options.budget_tokens, window_lines)
    if ctx is None and options.whole_file and lang is not None and is_supported(lang):
        ctx = whole_file_context(text, line, column, count_tokens, options.budget_tokens)
    if ctx is None:
        try:
            ctx = assemble_context(text, path, line, column, count_tokens=count_tokens,
                                   options=replace(options, language=lang), session=session)
        except AssemblyFailed as failed:
            FALLBACK_COUNTS[failed.cause] += 1
            log.warning("context fallback to baseline window for %s: %s", path, failed.reason)
            ctx = _window(text, line, column, count_tokens, options.budget_tokens, window_lines, failed.reason)
    counting = options.exact_file_tokens and not ctx.file_tokens_exact  # the whole file's count is exact already
    t_count = time.perf_counter()
    counted = ctx.file_tokens if ctx.file_tokens_exact else file_tokens(
        text, count_tokens if counting else None, shown_chars=len(ctx.prefix) + len(ctx.suffix),
        shown_tokens=ctx.context_tokens)
    timings = ({**ctx.timings_ms, "file_tokens": (time.perf_counter() - t_count) * 1000.0} if counting
               else ctx.timings_ms)
    return replace(ctx, path=path, language=lang, line=line, column=column, budget_tokens=options.budget_tokens,
                   file_lines=text.count("\n") + 1, file_tokens=counted,
                   file_tokens_exact=ctx.file_tokens_exact or options.exact_file_tokens, timings_ms=timings,
                   elapsed_ms=(time.perf_counter() - t0) * 1000.0)


def _window(text: str, line: int, column: int, count_tokens: TokenCounter, budget: int, window_lines: int,
            fallback_reason: str | None = None) -> AssembledContext:
    line, column = clamp_cursor(text, line, column)
    w = baseline_window(text, line, column, count_tokens=count_tokens, window_lines=window_lines, budget_tokens=budget)
    return AssembledContext(
        # counted whole: per-line sums (used for packing) overcount at line seams
        prefix=w.prefix, suffix=w.suffix, blocks=[], dropped=[], fallback_reason=fallback_reason,
        strategy="window-fallback" if fallback_reason else "window",
        file_tokens=0, context_tokens=count_tokens(w.prefix) + count_tokens(w.suffix), elapsed_ms=0.0, window=w)
