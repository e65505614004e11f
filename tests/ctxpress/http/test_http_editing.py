"""The bridges' pure parts: the cursor from the text around it, Continue's FIM templates, llama.cpp's
``response_fields``, stop strings."""

from __future__ import annotations

from ctxpress.http.continue_fim import Split, split_prompt
from ctxpress.http.editing import cursor_between, cut_at_stop, max_decode_ms, max_tokens, repository_from_git_url
from ctxpress.http.llama_cpp import nested_fields
from ctxpress_core.settings import Settings


def test_cursor_between_counts_lines_and_characters() -> None:
    settings = Settings()
    cursor = cursor_between("a = 1\nb = 'é😀", "'\nc = 3\n", settings)
    assert (cursor.text, cursor.line, cursor.column) == ("a = 1\nb = 'é😀'\nc = 3\n", 1, 7)
    assert (cursor_between("", "x\n", settings).line, cursor_between("", "x\n", settings).column) == (0, 0)
    assert cursor_between("x\n", "", settings).line == 1


def test_split_prompt_reads_continue_templates() -> None:
    assert split_prompt("<|fim_prefix|>def f():\n    <|fim_suffix|>\nx = 1<|fim_middle|>", None) == Split(
        "def f():\n    ", "\nx = 1")
    assert split_prompt("<|repo_name|>r\n<|file_sep|>a.py\nA\n<|file_sep|>pkg/b.py\n<|fim_prefix|>B<|fim_suffix|>C"
                        "<|fim_middle|>", None) == Split("B", "C", "pkg/b.py")
    assert split_prompt("<fim_prefix>B<fim_suffix>C<fim_middle>", None) == Split("B", "C")
    assert split_prompt("<PRE> B <SUF>C <MID>", None) == Split("B", "C")
    assert split_prompt("[SUFFIX]C[PREFIX]B", None) == Split("B", "C")
    assert split_prompt("plain before", "after") == Split("plain before", "after")


def test_nested_fields_as_llama_cpp_names_them() -> None:
    reply = {"content": "x", "timings": {"prompt_n": 3}, "tokens_cached": 1}
    assert nested_fields(reply, ["content", "timings/prompt_n", "timings/nope", ""]) == {
        "content": "x", "timings/prompt_n": 3}
    assert nested_fields(reply, None) is reply


def test_stop_strings_tokens_and_repository_names() -> None:
    assert cut_at_stop("a + b\n\nprint()", ["\n\n", "print"]) == ("a + b", True)
    assert cut_at_stop("a + b", "zzz") == ("a + b", False)
    settings = Settings()
    assert max_tokens(-1, settings) == settings.default_max_tokens and max_tokens(9999, settings) == 512
    assert repository_from_git_url("git@github.com:org/name.git") == "name"
    assert repository_from_git_url("https://github.com/org/name/") == "name"
    assert repository_from_git_url(None) is None


def test_llama_cpp_time_cap_becomes_the_wires_max_decode_ms() -> None:
    assert max_decode_ms(250) == 250
    assert max_decode_ms(0) is None and max_decode_ms(-1) is None and max_decode_ms(None) is None  # no limit there
    assert max_decode_ms(10**9) == 600_000
