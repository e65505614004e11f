"""Inputs that made one request's CPU work quadratic while holding the GIL (the worker's event loop froze
for minutes): whitespace runs, runs of stars, minified lines. Each pass is now linear; the rewritten
rules compute what the regexes they replace computed."""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from context.sources.retrieval import _ASSIGNED, _WHITESPACE, plan_query
from context.sources.window import (
    CURSOR_AFTER_CHARS,
    CURSOR_BEFORE_CHARS,
    MAX_LINE_CHARS,
    OTHER_LINE_CHARS,
    clip_long_lines,
)
from syntax.summaries import _reduce_import_text
from syntax.symbols.docs import _without_closing_marker

CLOSING = re.compile(r"(?:\*+/|\"\"\"|''')\s*$")
pieces = st.sampled_from(["*", "/", " ", "\t", '"', "'", "a", "x =", "in", ",", "(", "\n", "let ", "=="])


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(pieces, max_size=25).map("".join))
def test_rewritten_rules_compute_what_the_regexes_did(text: str) -> None:
    assert _without_closing_marker(text).strip() == CLOSING.sub("", text).strip()
    assert set(_ASSIGNED.findall(_WHITESPACE.sub(" ", text))) == set(_ASSIGNED.findall(text))


def test_whitespace_runs_and_star_runs_are_linear() -> None:
    blank_run = "def f(value):\n    total = value\n" + "\n" * 64_000 + "    return total\n"
    started = time.process_time()
    plan = plan_query("m.py", blank_run, blank_run.count("\n") - 1, "python")
    stars = _without_closing_marker("/** " + "*" * 500_000)
    padded = _reduce_import_text("python", "from a import (" + " " * 200_000 + "b)")
    seconds = time.process_time() - started
    assert "total" not in plan.unresolved  # assigned in the function: a local name, not a query word
    assert stars.startswith("/** ") and padded == "from a import (b)\n"
    print(f"whitespace and star runs of 64k-500k characters: {seconds * 1000:.0f} ms")


def test_long_lines_are_cut_around_the_cursor() -> None:
    minified = "var a=1;" * 10_000
    text = f"header\n{minified}\n{minified}\nfooter\n"
    column = 50_000
    clipped, new_column = clip_long_lines(text, 2, column)
    lines = clipped.split("\n")
    assert len(lines) == len(text.split("\n")) and lines[0] == "header" and lines[3] == "footer"
    assert lines[1] == minified[:OTHER_LINE_CHARS]
    assert lines[2] == minified[column - CURSOR_BEFORE_CHARS:column + CURSOR_AFTER_CHARS]
    assert lines[2][:new_column] == minified[column - CURSOR_BEFORE_CHARS:column]
    short = "x = 1\n" * 10
    assert clip_long_lines(short, 3, 2) == (short, 2) and MAX_LINE_CHARS > len("x = 1")
