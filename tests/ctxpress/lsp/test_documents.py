"""The server's document copy: incremental edits, positions in each encoding, wire positions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxpress.lsp.documents import Document, Encoding, PositionError, column_from_units, units_from_column

EMOJI_LINE = 'x = "😋é" + y'  # 😋 is 2 UTF-16 units and 4 UTF-8 bytes; é is 1 and 2


def test_columns_in_each_encoding() -> None:
    after_quote = EMOJI_LINE.index("😋")
    after_emoji = after_quote + 1
    assert column_from_units(EMOJI_LINE, after_quote + 2, Encoding.UTF16) == after_emoji
    assert column_from_units(EMOJI_LINE, after_quote + 4, Encoding.UTF8) == after_emoji
    assert column_from_units(EMOJI_LINE, after_emoji, Encoding.UTF32) == after_emoji
    # inside the surrogate pair: before the character
    assert column_from_units(EMOJI_LINE, after_quote + 1, Encoding.UTF16) == after_quote
    # past the end of the line: its end (LSP's rule)
    assert column_from_units(EMOJI_LINE, 999, Encoding.UTF16) == len(EMOJI_LINE)
    for encoding in Encoding:
        for column in range(len(EMOJI_LINE) + 1):
            assert column_from_units(EMOJI_LINE, units_from_column(EMOJI_LINE, column, encoding), encoding) == column


def test_incremental_edits_with_astral_characters() -> None:
    doc = Document("file:///a.py", f"{EMOJI_LINE}\nz = 1\n")
    units = units_from_column(EMOJI_LINE, EMOJI_LINE.index("é") + 1, Encoding.UTF16)
    doc.apply((0, units), (0, units), "🙂", Encoding.UTF16)
    assert doc.text.splitlines()[0] == 'x = "😋é🙂" + y'
    line, column = doc.wire_position(doc.offset_at(0, units + 2, Encoding.UTF16))
    assert (line, column) == (0, doc.text.index("🙂") + 1)


def test_crlf_and_lone_cr_lines_map_to_wire_lines() -> None:
    doc = Document("file:///a.py", "a = 1\r\nb = 2\rc = 3\n")
    # LSP sees three lines; the wire splits at "\n" only
    assert doc.line_count() == 4
    offset = doc.offset_at(2, 1, Encoding.UTF16)
    assert doc.text[offset] == " "
    assert doc.wire_position(offset) == (1, len("b = 2\rc"))


def test_position_past_the_end_is_an_error_and_changes_nothing() -> None:
    doc = Document("file:///a.py", "a\nb\n")
    with pytest.raises(PositionError):
        doc.offset_at(7, 0, Encoding.UTF16)
    with pytest.raises(PositionError):
        doc.apply((9, 0), (9, 1), "x", Encoding.UTF16)
    assert doc.text == "a\nb\n"


def test_recent_edits_follow_the_lines() -> None:
    doc = Document("file:///a.py", "".join(f"line {i}\n" for i in range(20)))
    doc.apply((15, 0), (15, 0), "x", Encoding.UTF16)
    doc.apply((15, 1), (15, 1), "y", Encoding.UTF16)  # same line: one range
    assert doc.edits == [(15, 15)]
    doc.apply((3, 0), (3, 0), "new\nlines\n", Encoding.UTF16)  # two lines added above
    assert doc.edits == [(3, 5), (17, 17)]
    doc.apply((0, 0), (2, 0), "", Encoding.UTF16)  # two lines removed above both; next to (1, 3): merged
    assert doc.edits == [(0, 3), (15, 15)]
    assert all(0 <= a <= b < doc.line_count() for a, b in doc.edits)


_LINE_PIECES = st.sampled_from(["a", "é", "🙂", "\n", "\r", "\r\n", "xy"])


@given(st.lists(_LINE_PIECES, max_size=30).map("".join),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.lists(_LINE_PIECES, max_size=4).map("".join)),
                max_size=12))
def test_line_starts_kept_through_edits_match_a_fresh_count(text: str, edits: list[tuple[int, int, str]]) -> None:
    doc = Document("file:///t.py", text)
    for a, b, new in edits:
        a, b = sorted((min(a, len(doc.text)), min(b, len(doc.text))))
        start, end = doc.position_at(a, Encoding.UTF32), doc.position_at(b, Encoding.UTF32)
        doc.apply(start, end, new, Encoding.UTF32)
        assert doc.line_starts() == Document("file:///t.py", doc.text).line_starts()
