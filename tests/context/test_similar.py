"""Similar lines: code elsewhere in the file that shares the cursor's rare identifiers."""

from __future__ import annotations

from collections.abc import Callable

from ctx_samples import CROP_ONLY

from context.assembly import in_file_context
from context.options import AssemblyOptions
from context.sources.similar import MAX_SNIPPETS, similar_candidates
from syntax.parsed_file import parse_text

Counter = Callable[[str], int]


def _filler(n: int) -> str:
    return "".join(f"def filler_{i}(x):\n    return x + {i}\n\n\n" for i in range(n))


SOURCE = (
    "def reflect(conn, schema):\n"
    "    rows = conn.get_multi_columns(\n"
    "        schema=schema,\n"
    "        info_cache=self.info_cache,\n"
    "        filter_names=names,\n"
    "    )\n"
    "    return rows\n\n\n"
    + _filler(120)
    + "def reflect_again(conn, schema):\n"
    "    rows = conn.get_multi_columns(\n"
    "        schema=schema,\n"
    "        "
)


def _cursor(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1])


def _estimate(a: int, b: int) -> int:
    return 8 * (b - a + 1)


def test_far_away_lines_sharing_rare_identifiers_are_found() -> None:
    line, column = _cursor(SOURCE)
    found = similar_candidates(parse_text(SOURCE, "python"), line, column, [(line - 2, line)], _estimate, 5)
    assert found, "the first call of get_multi_columns should be found"
    first = found[0]
    assert first.start_line <= 3 <= first.end_line  # the info_cache= line, right after the match
    assert "info_cache=self.info_cache," in first.forms[0].pieces[0].text
    assert "rare identifiers" in first.reason
    assert len(found) <= MAX_SNIPPETS
    # No excerpt repeats the lines already shown or another excerpt.
    ranges = sorted((c.start_line, c.end_line) for c in found)
    assert all(b < line - 2 or a > line for a, b in ranges)
    assert all(ranges[i][1] < ranges[i + 1][0] for i in range(len(ranges) - 1))


def test_common_words_alone_find_nothing() -> None:
    text = _filler(50) + "def f(x):\n    return x"
    line, column = _cursor(text)
    assert similar_candidates(parse_text(text, "python"), line, column, [(line - 1, line)], _estimate, 5) == []


def test_assembled_prompt_shows_the_similar_call_and_the_feature_switches_it_off(count_tokens: Counter) -> None:
    line, column = _cursor(SOURCE)
    on = in_file_context(SOURCE, "reflect.py", line, column, count_tokens=count_tokens,
                         options=AssemblyOptions(budget_tokens=400, timeout_ms=2000, **CROP_ONLY))
    assert on.strategy == "ast"
    assert "info_cache=self.info_cache," in on.prefix
    assert any(b.kind == "similar" for b in on.blocks)
    assert on.context_tokens <= 400
    off = in_file_context(SOURCE, "reflect.py", line, column, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=400, timeout_ms=2000, similar=False, **CROP_ONLY))
    assert not any(b.kind == "similar" for b in off.blocks)
    assert "info_cache=self.info_cache," not in off.prefix



def _snapshot(found):  # type: ignore[no-untyped-def]
    return [(c.start_line, c.end_line, c.reason, c.forms[0].pieces[0].text) for c in found]


def test_the_word_index_of_a_version_serves_a_later_one_that_differs_on_the_cursor_line() -> None:
    from context.sources import similar

    line = _cursor(SOURCE)[0]
    similar._WORD_INDEXES.clear()
    # a request higher up indexes the file as it is...
    similar_candidates(parse_text(SOURCE, "python", "r.py"), 2, 10, [(0, 6)], _estimate, 5)
    indexed = similar._WORD_INDEXES["r.py"]
    # ...and a request at the last line, typed on since, reuses it (that line recounted)
    typed = SOURCE + "filter_names=names,"
    found = similar_candidates(parse_text(typed, "python", "r.py"), line, len("        filter_names=names,"),
                               [(line - 2, line)], _estimate, 5)
    assert similar._WORD_INDEXES["r.py"] is indexed
    similar._WORD_INDEXES.clear()
    fresh = similar_candidates(parse_text(typed, "python", "r.py"), line, len("        filter_names=names,"),
                               [(line - 2, line)], _estimate, 5)
    assert similar._WORD_INDEXES["r.py"] is not indexed
    assert found and _snapshot(found) == _snapshot(fresh)


def test_typing_on_at_the_same_line_keeps_the_excerpts_offered_there() -> None:
    # Each keystroke's query differs (a word more); the excerpts must not, or the prompt before
    # the enclosing block changes at every keystroke and its KV with it.
    from context.sources import similar

    similar._WORD_INDEXES.clear()
    similar._OFFERED.clear()
    line = _cursor(SOURCE)[0]
    first = similar_candidates(parse_text(SOURCE + "info", "python", "r.py"), line, 4, [(line - 2, line)],
                               _estimate, 5)
    typed = SOURCE + "info_cache=self.info_cache, filter_names"
    again = similar_candidates(parse_text(typed, "python", "r.py"), line, len("        info_cache=self.info_cache, "
                                          "filter_names"), [(line - 2, line)], _estimate, 5)
    assert first and _snapshot(again) == _snapshot(first)
    # (asked afresh, the longer query would have offered something else)
    similar._OFFERED.clear()
    fresh = similar_candidates(parse_text(typed, "python", "r.py"), line, len("        info_cache=self.info_cache, "
                                          "filter_names"), [(line - 2, line)], _estimate, 5)
    assert _snapshot(fresh) != _snapshot(first)
    # at another line of the same file: asked afresh
    other = similar_candidates(parse_text(typed, "python", "r.py"), 2, 10, [(0, 6)], _estimate, 5)
    assert similar._OFFERED["r.py"][0] == 2 and _snapshot(other) != _snapshot(first)


def test_the_opened_version_indexed_whole_answers_as_word_by_word_lookups() -> None:
    from longfile import long_python_file

    from context.sources.similar import _IDENT, _word_index, _WordIndex, index_words

    path, text = long_python_file()
    text += "\nx1name = 0xdeadbeef + name_2 + éname + naïve_name\n"  # runs next to digits and non-ASCII
    parsed = parse_text(text, "python", path)
    starts = [*parsed.line_starts, len(parsed.source) + 1]
    whole, lazy = _WordIndex(parsed.source, starts), _WordIndex(parsed.source, starts)
    whole.index_all()
    words = sorted(set(_IDENT.findall(parsed.source)))
    assert len(words) > 500
    for word in [*words[::max(1, len(words) // 400)], b"name", b"name_2", b"deadbeef", b"x1name", b"nowhere_at_all"]:
        assert whole.lines(word) == lazy.lines(word), word
    # warming a file indexes it whole, and a new cursor in the file as it was uses that index
    index_words(parsed)
    lines = text.splitlines(keepends=True)
    cursor = parse_text("".join([*lines[:100], "    x = name", "\n", *lines[101:]]), "python", path)
    assert _word_index(cursor, 100, [*cursor.line_starts, len(cursor.source) + 1])._complete
