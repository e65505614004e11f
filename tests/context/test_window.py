from pathlib import Path

import pytest

from context.sources.window import baseline_window, split_at_cursor
from ctxpress_core.errors import CursorOutOfRange


def chars(text: str) -> int:
    return len(text)


def numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(n))


def test_split_at_cursor_mid_line() -> None:
    lines, before, after = split_at_cursor("abc\ndef\n", 1, 1)
    assert before == "d" and after == "ef\n"
    assert len(lines) == 3  # the empty line after the final newline is a cursor position


def test_cursor_out_of_range() -> None:
    with pytest.raises(CursorOutOfRange):
        split_at_cursor("abc\n", 5, 0)
    with pytest.raises(CursorOutOfRange):
        split_at_cursor("abc\n", 0, 4)
    split_at_cursor("abc\n", 0, 3)  # end of line is fine
    split_at_cursor("abc\n", 1, 0)  # after the last newline is fine


def test_window_is_plus_minus_n_lines_and_reassembles() -> None:
    text = numbered(1000)
    w = baseline_window(text, 500, 2, count_tokens=chars, window_lines=200, budget_tokens=10**9)
    assert w.start_line == 300 and w.end_line == 700
    assert not w.truncated
    lines = text.splitlines(keepends=True)
    assert w.prefix + w.suffix == "".join(lines[300:701])
    assert w.prefix.endswith("line 500\n"[:2])


def test_window_clamps_at_file_edges() -> None:
    w = baseline_window(numbered(50), 3, 0, count_tokens=chars, window_lines=200, budget_tokens=10**9)
    assert (w.start_line, w.end_line) == (0, 50)


def test_budget_drops_far_lines_first_and_is_respected() -> None:
    text = numbered(1000)
    w = baseline_window(text, 500, 0, count_tokens=chars, window_lines=200, budget_tokens=400)
    assert w.truncated
    assert chars(w.prefix) + chars(w.suffix) <= 400
    assert w.tokens == chars(w.prefix) + chars(w.suffix)
    # nearest lines kept on both sides
    assert w.prefix.endswith("line 499\n") and w.suffix.startswith("line 500\nline 501\n")
    # the prefix gets the larger share
    assert chars(w.prefix) > chars(w.suffix)


def test_budget_with_the_real_tokenizer(model_path: Path) -> None:
    from serving.tokenizer import Tokenizer

    tok = Tokenizer(model_path)
    text = "".join(f"def function_{i}(x):\n    return x * {i} + helper_{i}(x)\n\n" for i in range(400))
    w = baseline_window(text, 600, 4, count_tokens=tok.count, window_lines=200, budget_tokens=256)
    assert w.truncated
    # summing line counts can differ from counting the whole text by a token at a seam
    assert tok.count(w.prefix) + tok.count(w.suffix) <= 256 + 4


def test_a_window_on_a_grid_starts_alike_while_the_developer_types_on_and_keeps_its_budget() -> None:
    lines = [f"value_{i} = compute({i})\n" for i in range(400)]
    starts, plain_starts = set(), set()
    for typed in range(0, 60, 3):  # a developer typing on at line 300: the prefix grows by 3 characters a time
        text = "".join(lines[:300]) + "x" * typed + "\n" + "".join(lines[300:])
        gridded = baseline_window(text, 300, typed, count_tokens=chars, budget_tokens=600, start_grid=8)
        plain = baseline_window(text, 300, typed, count_tokens=chars, budget_tokens=600)
        assert gridded.start_line % 8 == 0 and gridded.start_line >= plain.start_line
        assert gridded.tokens <= 600 and gridded.prefix + gridded.suffix in text
        assert gridded.prefix.endswith("x" * typed) and gridded.truncated
        starts.add(gridded.start_line)
        plain_starts.add(plain.start_line)
    assert len(starts) <= 2 < len(plain_starts)  # the plain window's start moves with nearly every keystroke
