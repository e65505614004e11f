from workers.postprocess import clean_completion


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
