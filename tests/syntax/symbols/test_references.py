"""References from the tree with their receivers; the cursor line's from its text: the same receivers as the
regex rule they replace, in linear time."""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from syntax.parsed_file import parse_text
from syntax.symbols.references import _receiver_before, line_references, references_in_range

# The rule as a regex anchored at each name (what line_references computed, quadratically).
RECEIVER = re.compile(r"([A-Za-z_]\w*|\S)\s*(\.|->|::)\s*$")
NAME = re.compile(r"[A-Za-z_]\w*")

pieces = st.sampled_from(["a", "b1", "_x", "é", "1", " ", "  ", ".", "->", "::", ":", "-", ">", "(", ")", "\t", "Ab"])


def test_references_come_from_the_tree_with_receivers() -> None:
    text = "def f(self):\n    # helper in a comment\n    s = 'helper'\n    return self.helper(util(x.attr))\n"
    parsed = parse_text(text, "python")
    refs = references_in_range(parsed, 0, len(parsed.source))
    names = [(r.name, r.receiver, r.is_member) for r in refs]
    assert ("helper", "self", True) in names
    assert ("util", None, False) in names
    assert ("attr", "x", True) in names
    assert sum(1 for r in refs if r.name == "helper") == 1  # not the comment, not the string


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(pieces, max_size=30).map("".join))
def test_receiver_matches_the_regex_rule(code: str) -> None:
    for m in NAME.finditer(code):
        expected = RECEIVER.search(code, 0, m.start())
        assert _receiver_before(code, m.start()) == (expected.group(1) if expected else None), (code, m.start())


def test_a_long_minified_line_costs_one_pass() -> None:
    line = "x = " + " ".join(f"a{i}.b{i}" for i in range(20_000))  # ~200 KB of names on one line
    parsed = parse_text(f"def f():\n    {line}\n", "python", "m.py")
    started = time.process_time()
    refs = line_references(parsed, 1)
    seconds = time.process_time() - started
    assert len(refs) == 40_001 and refs[2].receiver == "a0" and refs[-1].receiver == "a19999"
    assert refs[-1].byte == len(f"def f():\n    {line}".encode()) - len("b19999")
    print(f"40,001 references on a 200 KB line in {seconds * 1000:.0f} ms")
