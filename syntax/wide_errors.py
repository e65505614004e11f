"""Wide parse errors: an error node over several lines has swallowed declarations, where local
damage (a half-typed expression) leaves them intact."""

from __future__ import annotations

from tree_sitter import Query, QueryCursor

from syntax.grammars import language_of
from syntax.parsed_file import ParsedFile

_error_queries: dict[str, Query] = {}


def error_query(language: str) -> Query:
    """The query capturing ``language``'s error nodes, compiled once."""
    q = _error_queries.get(language)
    if q is None:
        q = Query(language_of(language), "(ERROR) @e")
        _error_queries[language] = q
    return q


def has_wide_error(parsed: ParsedFile, max_lines: int = 3) -> bool:
    """True when some error node spans more than ``max_lines`` lines: local damage (a half-typed
    expression) leaves the declarations intact, a wide error has swallowed some of them."""
    for nodes in QueryCursor(error_query(parsed.language)).captures(parsed.tree.root_node).values():
        for node in nodes:
            if node.end_point.row - node.start_point.row > max_lines:
                return True
    return False
