from hypothesis import given, settings
from hypothesis import strategies as st

from workers.completion.postprocess import CompletionSettled, clean_completion


def test_plain_completion_unchanged() -> None:
    assert clean_completion("a + b", "\n\nprint(add(1, 2))\n") == "a + b"


def test_cuts_code_fence() -> None:
    assert clean_completion("x = compute()\n```\nThis computes x", "") == "x = compute()"


def test_cuts_repeated_suffix_lines() -> None:
    suffix = "\n    total = sum(values)\n    return total\n"
    completion = "values = [v for v in items]\n    total = sum(values)\n    return total"
    assert clean_completion(completion, suffix) == "values = [v for v in items]"


def test_cuts_prose() -> None:
    assert clean_completion("return n * 2\nThis function doubles n.", "") == "return n * 2"


def test_cuts_special_tokens() -> None:
    assert clean_completion("foo()<|file_sep|>other", "") == "foo()"


def test_drops_rest_of_line_repeat() -> None:
    # the cursor is before "):" which is already in the file
    assert clean_completion("a, b):", "):\n    pass\n") == "a, b"


def test_short_suffix_lines_are_not_anchors() -> None:
    # "}" is too common to prove a repeat
    assert clean_completion("x++;\n}", "\n}\n") == "x++;\n}"


# Rule 1: a cursor at the start of a line that holds code (HumanEval/55, random span). The completion is
# inserted as returned: without its final newline its last line would be joined to that code.
def test_keeps_final_newline_before_code_on_the_cursor_line() -> None:
    completion = "    if n == 0:\n        return 0\n    if n == 1:\n        return 1\n"
    suffix = "    return fib(n - 1) + fib(n - 2)\n"
    cleaned = clean_completion(completion, suffix, prefix='def fib(n):\n', language="python")
    assert cleaned == completion
    compile("def fib(n):\n" + cleaned + suffix, "<fib>", "exec")


def test_drops_only_the_indentation_when_the_code_brings_its_own() -> None:
    cleaned = clean_completion("    n = abs(n)\n    ", "    return n\n", prefix="def f(n):\n", language="python")
    assert cleaned == "    n = abs(n)\n"


def test_line_start_anchor_cut_keeps_the_newline() -> None:
    # the rest of the cursor line is a whole line of code: re-typing it is a repeat too
    completion = "    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)"
    suffix = "    return fib(n - 1) + fib(n - 2)\n"
    cleaned = clean_completion(completion, suffix, prefix="def fib(n):\n", language="python")
    assert cleaned == "    if n < 2:\n        return n\n"


def test_empty_line_completion_still_loses_trailing_blank_lines() -> None:
    cleaned = clean_completion("    x = 1\n    return x\n\n", "\n\ndef g():\n", prefix="def f():\n",
                               language="python")
    assert cleaned == "    x = 1\n    return x"


# Rule 2: a mid-line cursor gets its line only (HumanEval/103: `return bin(` with `)` after).
def test_mid_line_cursor_is_held_to_its_line() -> None:
    cleaned = clean_completion("bc, d)\nprint(f(1))\nprint(f(2))", ")\n", prefix="    return f(a", language="python")
    assert cleaned == "bc, d"


def test_mid_line_completion_does_not_close_what_the_line_closes() -> None:
    completion = "round(summation / (m - n + 1)))[2:]\nprint(rounded_avg(1, 5))"
    cleaned = clean_completion(completion, ")\n", prefix="    return bin(", language="python")
    assert cleaned == "round(summation / (m - n + 1))"


def test_mid_line_brackets_in_strings_do_not_count() -> None:
    cleaned = clean_completion('s.split(")") + x', ")\n", prefix="    return len(", language="python")
    assert cleaned == 's.split(")") + x'


def test_end_of_line_cursor_may_open_a_block() -> None:
    # nothing after the cursor on its line: the completion finishes the header and writes the body
    completion = "):\n    return a + b\n"
    assert clean_completion(completion, "\n", prefix="def add(a, b", language="python") == "):\n    return a + b"


# Rule 3: a completion the token limit cut goes back to its last finished statement.
def test_limit_cut_goes_back_to_the_last_statement() -> None:
    completion = "        for x in xs:\n            total += x\n        result = [a for a in xs if a >"
    cleaned = clean_completion(completion, "\n    return result\n", prefix="def f(xs):\n    total = 0\n",
                               language="python", finish_reason="length")
    assert cleaned == "        for x in xs:\n            total += x"


def test_limit_cut_in_an_open_bracket_shows_nothing_of_it() -> None:
    completion = "    x = 1\n    values = [\n        1,\n        2,\n"
    cleaned = clean_completion(completion, "\n    return values\n", prefix="def f():\n", language="python",
                               finish_reason="length")
    assert cleaned == "    x = 1"


def test_limit_cut_drops_a_header_left_without_body() -> None:
    completion = "    if a:\n        b()\n    elif c:\n        d"
    cleaned = clean_completion(completion, "\n    return 0\n", prefix="def f(a, c):\n", language="python",
                               finish_reason="length")
    assert cleaned == "    if a:\n        b()"


def test_limit_cut_in_braces() -> None:
    completion = "    y();\n    if (x) {\n        z();\n        w(1,"
    cleaned = clean_completion(completion, "\n    return 0;\n}\n", prefix="int f(int x) {\n", language="c",
                               finish_reason="length")
    assert cleaned == "    y();"


def test_same_text_that_stopped_by_itself_is_kept() -> None:
    completion = "        for x in xs:\n            total += x\n        result = total"
    cleaned = clean_completion(completion, "\n    return result\n", prefix="def f(xs):\n", language="python",
                               finish_reason="stop")
    assert cleaned == completion


# Rule 4: never end on a header whose body is missing (HumanEval/105/L9_L13).
def test_drops_a_trailing_header_without_body() -> None:
    completion = "    x = 1\n    if x > 2:\n"
    cleaned = clean_completion(completion, "\n    return x\n", prefix="def f():\n", language="python")
    assert cleaned == "    x = 1"


def test_keeps_a_header_whose_body_follows_the_cursor() -> None:
    # the single-line benchmark's hole may be exactly a header: its body is the code after the cursor
    cleaned = clean_completion("    for i in range(n):", "\n        total += i\n", prefix="def f(n):\n",
                               language="python")
    assert cleaned == "    for i in range(n):"


def test_drops_a_trailing_brace_header() -> None:
    cleaned = clean_completion("    foo();\n    while (x) {", "\n    return 0;\n}\n", prefix="int f(int x) {\n",
                               language="c")
    assert cleaned == "    foo();"


# The block at the cursor: the completion stops where it leaves it.
def test_python_stops_where_the_indentation_leaves_the_block() -> None:
    completion = "        total += x\n    return total\n\nprint(f([1, 2]))\nprint(f([]))"
    cleaned = clean_completion(completion, "\n    return total * 2\n", prefix="def f(xs):\n    for x in xs:\n",
                               language="python")
    assert cleaned == "        total += x\n    return total"


def test_braces_stop_before_closing_the_block_the_file_closes() -> None:
    cleaned = clean_completion("    x++;\n}\n\nint main(void) {", "\n}\n", prefix="void f(void) {\n", language="c")
    assert cleaned == "    x++;"


def test_limit_cut_keeps_the_first_line_and_cuts_a_block_back_to_its_last_statement() -> None:
    assert clean_completion("total = a + b", "\n", prefix="    ", language="python", finish_reason="length") == \
        "total = a + b"
    # a line cut short is still a suggestion: editors show it and the user takes what is right of it
    assert clean_completion("total = max(a,", "\n", prefix="    ", language="python", finish_reason="length") == \
        "total = max(a,"
    assert clean_completion("total = max(a,\n        b", "\n", prefix="    ", language="python",
                            finish_reason="length") == "total = max(a,"
    assert clean_completion("x = 1\n    y = f(x,\n        2", "\n", prefix="    ", language="python",
                            finish_reason="length") == "x = 1"


def test_python_completion_may_dedent_within_its_definition() -> None:
    # HumanEval/95/L1_L7: the hole starts in an `if` body and goes on at the function's level
    prefix = "def check(d):\n    if not d:\n"
    completion = "        return False\n    state = 'start'\n    for key in d:\n        state = key"
    cleaned = clean_completion(completion, "\n        if state == 'x':\n            break\n    return True\n",
                               prefix=prefix, language="python")
    assert cleaned == completion


def test_python_stops_where_the_method_ends() -> None:
    # the next method is not part of the block at the cursor: the suggestion ends with the method it is in
    prefix = "class A:\n    def f(self, xs):\n        for x in xs:\n"
    completion = "            self.n += x\n        return self.n\n\n    def g(self):\n        pass\n\na = A()"
    cleaned = clean_completion(completion, "\n        return 0\n", prefix=prefix, language="python")
    assert cleaned == "            self.n += x\n        return self.n"
    # a signature on several lines is not the function's end; at the end of the file it still ends there
    prefix = "class A:\n    def f(\n        self, xs\n    ) -> int:\n        total = 0\n"
    completion = "        for x in xs:\n            total += x\n        return total\n    @property\n    def g(self):"
    cleaned = clean_completion(completion, "", prefix=prefix, language="python")
    assert cleaned == "        for x in xs:\n            total += x\n        return total"


def test_python_function_in_a_block_of_a_function_ends_at_its_own_def() -> None:
    prefix = "def outer(xs):\n    def inner(x):\n        if x:\n"
    completion = "            return 1\n        return 0\n    return [inner(x) for x in xs]"
    cleaned = clean_completion(completion, "\n", prefix=prefix, language="python")
    assert cleaned == "            return 1\n        return 0"


# --- stopping the engine early (CompletionSettled) ---

_PREFIXES = ["def f(a, b):\n    return ", "class A:\n    def m(self):\n        ", "x = [\n    ", "def g(x):\n    if x",
             "", "int f() {\n    ", "def h():\n    y = compute("]
_SUFFIXES = ["\n\n\ndef sub(a, b):\n    return a - b\n", "\n        return self.value\n", ")\n    return y\n",
             "\n}\n", "", "\n", "]\nprint(x)\n"]
_LINES = ["a + b", "    return a - b", "def sub(a, b):", "x = 1", "    y = 2", "        z = (", "    )", "print(x)",
          "}", "  # note", "Explanation: this adds", "```python", "<|endoftext|>", "    return self.value", "if x:",
          "", "    ", "]", "return y"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_PREFIXES), st.sampled_from(_SUFFIXES), st.sampled_from(["python", "c", None]),
       st.lists(st.sampled_from(_LINES), min_size=1, max_size=8), st.sampled_from(["stop", "length"]))
def test_stopping_where_settled_changes_nothing_the_editor_gets(prefix: str, suffix: str, language: str | None,
                                                               lines: list[str], finish: str) -> None:
    full = "\n".join(lines)
    expected = clean_completion(full, suffix, prefix=prefix, language=language, finish_reason=finish)
    settled = CompletionSettled(suffix, prefix=prefix, language=language)  # one per request, asked at every cut
    for cut in range(len(full) + 1):
        if settled(full[:cut]):
            assert clean_completion(full[:cut], suffix, prefix=prefix, language=language,
                                    finish_reason="stop") == expected, cut


def test_settled_at_a_line_that_retypes_the_code_after_the_cursor() -> None:
    settled = CompletionSettled("\n\n\ndef sub(a, b):\n    return a - b\n", prefix="def f(a, b):\n    return ",
                                language="python")
    assert not settled("a + b\n\n")
    assert settled("a + b\n\n\ndef sub(a, b):\n")


def test_settled_for_a_mid_line_cursor_once_its_line_ends() -> None:
    settled = CompletionSettled(")\n", prefix="    return (", language="python")
    assert not settled("a + b")
    assert settled("a + b\n")


def test_not_settled_while_the_block_goes_on() -> None:
    settled = CompletionSettled("\n    return y\n", prefix="def f(x):\n    if x:\n", language="python")
    assert not settled("        y = 1\n        z = 2\n")
    assert settled("        y = 1\nprint(y)\n")


def test_cuts_an_elision_marker_the_model_copied_from_the_prompt() -> None:
    completion = "False\n\n    # ... (lines 1123-1125 elided)\n    return True"
    assert clean_completion(completion, "\n\nclass Other:\n    pass\n", prefix="def f():\n    return ") == "False"
    assert clean_completion("x = 1\n// ... (line 7 elided)\n", "\n", prefix="", language="javascript") == "x = 1"
    assert clean_completion("# ... (lines 2-9 elided)\nx = 1", "\n") == ""
    plain = "x = 1  # ... keep\n# ... more to come\ny = 2"  # comments of the code's own: kept
    assert clean_completion(plain, "\n") == plain
    settled = CompletionSettled("\n\nclass Other:\n    pass\n", prefix="def f():\n    return ", language="python")
    assert not settled("False\n")
    assert settled("False\n    # ... (lines 1123-1125 elided)\n")
