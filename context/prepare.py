"""The in-file context of one request (context/in_file.py chooses its strategy), with its report, from the
request's resolved features: a file with a line too long to parse gets the window with its long lines cut.
CPU-bound: runs in an executor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from context.in_file import in_file_context
from context.options import AssemblyOptions
from context.session import FileSessions
from context.sources.window import MAX_LINE_CHARS, clip_long_lines, split_at_cursor
from context.warm import warm_file
from ctxpress_core.features import resolve
from ctxpress_core.languages import language_from_path
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, ContextReport


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
        options = AssemblyOptions.with_features(
            features, budget_tokens=budget, timeout_ms=self.settings.assembly_timeout_ms, language=language,
            recent_edit_lines=request.recent_edits or ()) if crop else AssemblyOptions(budget_tokens=budget,
                                                                                      language=language)
        ctx = in_file_context(text, request.path, request.line, column, count_tokens=self.count_tokens,
                              options=options, crop=crop, session=session, window_lines=self.settings.window_lines)
        report = ContextReport(
            strategy=ctx.strategy,
            sources=sorted({b.kind for b in ctx.blocks}) or ["window"],
            file_tokens=0,  # the worker counts the file while the engine works
            context_tokens=ctx.context_tokens,
            window_start_line=ctx.window.start_line if ctx.window else None,
            window_end_line=ctx.window.end_line if ctx.window else None,
            truncated=ctx.window.truncated if ctx.window else False,
            degraded=(f"long lines: a line of {longest_line:,} characters (over {MAX_LINE_CHARS:,})" if long_lines
                      else ctx.fallback_reason),
            budget_tokens=budget,
            blocks=[b.to_report() for b in ctx.blocks],
            dropped=[b.to_report() for b in ctx.dropped],
        )
        return Prepared(ctx.prefix, ctx.suffix, report, language, digest, features, stable_chars=ctx.stable_chars,
                        steady=ctx.steady)
