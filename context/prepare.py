"""What a request settles before its in-file context is built (``settle``: its features, budget and language, its
long lines cut, its ``AssemblyOptions``) and the context with its report after (``prepared``): the steps either
side of ``in_file_context`` in ``ContextLibrary.build_prompt``."""

from __future__ import annotations

from dataclasses import dataclass

from context.model import AssembledContext
from context.options import AssemblyOptions
from context.sources.window import MAX_LINE_CHARS, clip_long_lines, longest_line, split_at_cursor
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


@dataclass(frozen=True)
class Settled:
    """A request's in-file context, settled once: the text and cursor column it is built from, and how."""

    text: str  # the request's, its long lines cut
    column: int
    features: dict[str, bool]  # request_features; none for a file with lines too long to parse
    language: str  # the request's, else from the path (the warm-up and the assembly are given it)
    crop: bool  # feature crop: the whole file or the assembly, else the window
    options: AssemblyOptions
    longest_line: int  # the file's, in characters (over MAX_LINE_CHARS: minified or generated code, not parsed)


def settle(request: CompletionRequest, text: str, settings: Settings) -> Settled:
    """Raises CursorOutOfRange (answered cursor_out_of_range). CPU-bound (the text's length): runs in an executor."""
    split_at_cursor(text, request.line, request.column)
    features = request_features(request)
    budget = settings.baseline_budget_tokens if request.mode == "baseline" else settings.context_budget_tokens
    column, longest = request.column, longest_line(text)
    if longest > MAX_LINE_CHARS:
        text, column = clip_long_lines(text, request.line, request.column)
        features, budget = {}, settings.context_budget_tokens
    budget = request.budget_tokens or budget
    language, crop = request.language or language_from_path(request.path, text), features.get("crop", False)
    options = (AssemblyOptions.with_features(features, budget_tokens=budget, language=language,
                                             timeout_ms=settings.assembly_timeout_ms,
                                             recent_edit_lines=request.recent_edits or ())
               if crop else AssemblyOptions(budget_tokens=budget, language=language))
    return Settled(text, column, features, language, crop, options, longest)


def prepared(ctx: AssembledContext, settled: Settled, digest: str) -> Prepared:
    """The in-file context ``ctx`` built as ``settled``, with its report."""
    window = ctx.window
    report = ContextReport(
        strategy=ctx.strategy, sources=sorted({b.kind for b in ctx.blocks}) or ["window"],
        file_tokens=0,  # the worker counts the file while the engine works
        context_tokens=ctx.context_tokens, budget_tokens=settled.options.budget_tokens,
        window_start_line=window and window.start_line, window_end_line=window and window.end_line,
        truncated=bool(window and window.truncated),
        degraded=(f"long lines: a line of {settled.longest_line:,} characters (over {MAX_LINE_CHARS:,})"
                  if settled.longest_line > MAX_LINE_CHARS else ctx.fallback_reason),
        blocks=[b.to_report() for b in ctx.blocks], dropped=[b.to_report() for b in ctx.dropped])
    return Prepared(ctx.prefix, ctx.suffix, report, settled.language, digest, settled.features,
                    stable_chars=ctx.stable_chars, steady=ctx.steady)
