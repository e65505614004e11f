"""Loading grammars, parsers and queries ahead of the first request (~10 ms each cold)."""

from __future__ import annotations

from syntax.grammars import SUPPORTED_LANGUAGES, get_parser
from syntax.symbols.references import reference_query
from syntax.wide_errors import error_query


def warm_up(languages: frozenset[str] | None = None) -> None:
    """Load grammars, parsers and reference queries ahead of the first request (~10 ms each cold)."""
    for lang in languages or SUPPORTED_LANGUAGES:
        get_parser(lang)
        reference_query(lang)
        error_query(lang)
