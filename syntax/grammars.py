"""The tree-sitter grammars: which languages have one, a parser per thread, the grammar itself.

Which language a path is comes from ``ctxpress_core.languages``; this module only says which of
those languages the syntax package can parse (block cropping, symbols, references).
"""

from __future__ import annotations

import threading

from tree_sitter import Language, Parser
from tree_sitter_language_pack import get_language
from tree_sitter_language_pack import get_parser as _pack_parser

from ctxpress_core.languages import language_from_path

# Languages with block cropping. Names are tree-sitter-language-pack grammar names.
SUPPORTED_LANGUAGES: frozenset[str] = frozenset(
    {"python", "javascript", "typescript", "tsx", "go", "java", "rust", "c", "cpp"}
)

def detect_language(path: str, text: str | None = None) -> str | None:
    """The grammar for ``path`` (``ctxpress_core.languages``: a ``.h`` showing C++ constructs is cpp), or
    None when there is none."""
    language = language_from_path(path, text)
    return language if language in SUPPORTED_LANGUAGES else None


def is_supported(language: str | None) -> bool:
    return language is not None and language in SUPPORTED_LANGUAGES


_local = threading.local()


def get_parser(language: str) -> Parser:
    """A parser for ``language``, one per thread (tree-sitter parsers are not thread-safe)."""
    parsers: dict[str, Parser] | None = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = {}
        _local.parsers = parsers
    parser = parsers.get(language)
    if parser is None:
        if language not in SUPPORTED_LANGUAGES:
            raise ValueError(f"unsupported language: {language!r}")
        parser = _pack_parser(language)  # type: ignore[arg-type]
        parsers[language] = parser
    return parser


def language_of(language: str) -> Language:
    """The grammar of ``language``, for queries over its trees."""
    return get_language(language)  # type: ignore[arg-type]
