"""The in-file context of one request: the baseline window (mode=baseline, or the ``crop`` feature off),
the assembled context of mode=optimized (context/assemble.py), or, for a file with a line too long to parse,
the window with its long lines cut. CPU-bound: runs in an executor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from context.assemble import assemble_context
from context.options import AssemblyOptions
from context.session import FileSessions
from context.sources.window import MAX_LINE_CHARS, Window, baseline_window, clip_long_lines, split_at_cursor
from context.warm import warm_file
from ctxpress_core.features import resolve as resolve_features
from ctxpress_core.languages import language_from_path
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, ContextReport


@dataclass
class Prepared:
    prefix: str
    suffix: str
    report: ContextReport
    language: str
    digest: str
    features: dict[str, bool]
    stable_chars: int = 0  # prefix[:stable_chars] changes least: cross-file chunks go after it
    # The in-file excerpts were kept from the previous request (typing in the same block): so are
    # the cross-file chunks after them (see chunks.CrossFileChunks.add).
    steady: bool = False


class ContextPreparer:
    def __init__(self, settings: Settings, count_tokens: Callable[[str], int], sessions: FileSessions) -> None:
        self.settings = settings
        self.count_tokens = count_tokens
        self.sessions = sessions  # the files' parse trees and steady excerpts

    def prepare(self, request: CompletionRequest, text: str, digest: str, *, owner: str | None) -> Prepared:
        """``owner``: whose view of the file it is (the team user; None on the single-user appliance): the session's
        steady excerpts are that user's own."""
        # settled here once: the warm-up and the assembly are given it rather than working it out again
        language = request.language or language_from_path(request.path, text)
        default_budget = (self.settings.baseline_budget_tokens if request.mode == "baseline"
                          else self.settings.context_budget_tokens)
        budget = request.budget_tokens or default_budget
        split_at_cursor(text, request.line, request.column)  # CursorOutOfRange: answered cursor_out_of_range
        enabled = resolve_features(request.features) if request.mode == "optimized" else {}
        if request.mode == "baseline" or not enabled["crop"]:
            w = self._window(request, text, budget)
            report = ContextReport(
                strategy="window",
                sources=["window"],
                file_tokens=0,
                # counted whole: per-line sums (used for packing) overcount at line seams
                context_tokens=self.count_tokens(w.prefix) + self.count_tokens(w.suffix),
                window_start_line=w.start_line,
                window_end_line=w.end_line,
                truncated=w.truncated,
                budget_tokens=budget,
            )
            return Prepared(w.prefix, w.suffix, report, language, digest, enabled)
        return self._assembled(request, text, digest, language, budget, enabled, owner)

    def prepare_long_lines(self, request: CompletionRequest, text: str, digest: str, longest: int, *,
                           owner: str | None) -> Prepared:
        """A file with a line over ``MAX_LINE_CHARS``: the baseline window of the file with its long lines cut."""
        split_at_cursor(text, request.line, request.column)  # CursorOutOfRange: answered cursor_out_of_range
        clipped, column = clip_long_lines(text, request.line, request.column)
        prepared = self.prepare(request.model_copy(update={"column": column, "mode": "baseline",
                                                           "budget_tokens": request.budget_tokens or
                                                           self.settings.context_budget_tokens}),
                                clipped, digest, owner=owner)
        prepared.report.degraded = f"long lines: a line of {longest:,} characters (over {MAX_LINE_CHARS:,})"
        return prepared

    def _window(self, request: CompletionRequest, text: str, budget: int) -> Window:
        return baseline_window(text, request.line, request.column, count_tokens=self.count_tokens,
                               window_lines=self.settings.window_lines, budget_tokens=budget)

    def _assembled(self, request: CompletionRequest, text: str, digest: str, language: str, budget: int,
                   enabled: dict[str, bool], owner: str | None) -> Prepared:
        def fallback() -> tuple[str, str]:  # the window, within optimized's budget
            w = self._window(request, text, budget)
            return w.prefix, w.suffix

        session = self.sessions.get(request.repository, request.path, owner)
        if not session.parsed():
            # A file's first request, no file_opened before it: its warm-up (the parse, symbols and line counts, in
            # proportion to the file, which the payload limit bounds) is done here, outside the assembly's deadline,
            # which is for the work at each keystroke. Otherwise a long file's first request fell back to the window
            # every time, and the prompt of its next request shared nothing with it.
            warm_file(session, text, language, count_tokens=self.count_tokens)
        options = AssemblyOptions.with_features(
            enabled, budget_tokens=budget, timeout_ms=self.settings.assembly_timeout_ms, language=language,
            recent_edit_lines=request.recent_edits or (), fallback=fallback)
        ctx = assemble_context(text, request.path, request.line, request.column, count_tokens=self.count_tokens,
                               options=options, session=session)
        report = ContextReport(
            strategy=ctx.strategy,
            sources=sorted({b.kind for b in ctx.blocks}) or ["window"],
            file_tokens=0,
            context_tokens=ctx.context_tokens,
            degraded=ctx.fallback_reason,
            budget_tokens=budget,
            blocks=[b.to_report() for b in ctx.blocks],
            dropped=[b.to_report() for b in ctx.dropped],
        )
        return Prepared(ctx.prefix, ctx.suffix, report, language, digest, enabled, stable_chars=ctx.stable_chars,
                        steady=ctx.steady)
