"""Context assembly on random source text: never an exception, always within the budget."""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context.assembly import in_file_context
from context.options import AssemblyOptions
from ctxpress_core.languages import KNOWN_LANGUAGES
from workers.completion.postprocess import clean_completion

EXAMPLES = int(os.environ.get("CTXPRESS_FUZZ_EXAMPLES", "150"))

# Fragments of real syntax, so the parser sees nested and broken code and not only noise.
FRAGMENTS = ["def f(x):\n", "    return x\n", "class A:\n", "    def m(self):\n", "if (a and b):\n", "{", "}",
             "(", ")", "[", "]", '"""', "'", '"', "#", "//", "/*", "*/", "\t", "\r\n", "\r", "\n", "\\",
             "function g() {", "fn main() {", "func h() {", "public class B {", "import os\n", "from a import b\n",
             "x" * 300, "(" * 200, "😋", "é", "\x00", "\u2028", "\ufeff"]
source = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=120).map("".join)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=source, data=st.data(), language=st.sampled_from(sorted(KNOWN_LANGUAGES)),
       budget=st.sampled_from([64, 256, 1024]))
def test_assembly_never_fails_on_random_source(text: str, data: st.DataObject, language: str, budget: int,
                                               count_tokens: Callable[[str], int]) -> None:
    lines = text.split("\n")  # the wire's lines: "\n" ends a line, nothing else does
    line = data.draw(st.integers(0, len(lines) - 1))
    column = data.draw(st.integers(0, len(lines[line].removesuffix("\r"))))

    ctx = in_file_context(text, f"f.{language}", line, column, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=budget, language=language, timeout_ms=200))
    assert isinstance(ctx.prefix, str) and isinstance(ctx.suffix, str)
    assert ctx.context_tokens <= budget + 8 or ctx.strategy == "window-fallback"
    # what precedes the cursor on its line is always in the prefix
    assert ctx.prefix.endswith(lines[line][:column])
    cleaned = clean_completion(data.draw(st.text(max_size=200)), ctx.suffix)
    assert isinstance(cleaned, str)


def test_a_lone_carriage_return_is_content_not_a_line_end(count_tokens: Callable[[str], int]) -> None:
    """The wire ends a line at ``\n`` (its ``\r`` before it included): in ``"\r\r\n"`` the cursor may stand
    after the first ``\r``. Seen failing: ``CursorOutOfRange: column 1 is past the end of line 0``."""
    ctx = in_file_context("\r\r\n", "f.py", 0, 1, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=64, language="python", timeout_ms=200))
    assert ctx.prefix.endswith("\r") and ctx.suffix.startswith("\r\n")


def test_a_cursor_block_over_the_budget_falls_back_instead_of_overrunning_it(
        count_tokens: Callable[[str], int]) -> None:
    """A line of 200 brackets with the cursor in its middle, 64 tokens of budget: the block cannot be cut
    below the cursor line, so the assembler says so and the request gets the window within the budget."""
    text = "int f() {\n" + "(" * 200 + "\n}\n"
    ctx = in_file_context(text, "f.c", 1, 100, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=64, language="c", timeout_ms=2_000))
    assert ctx.strategy == "window-fallback"
    assert ctx.fallback_reason is not None and "block alone" in ctx.fallback_reason
