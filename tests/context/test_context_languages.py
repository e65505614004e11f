"""Each supported language parses and crops: enclosing block whole, referenced helper before the
unreferenced one, prefix ending exactly at the cursor."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ctx_samples import CROP_ONLY, EXPECTED, SAMPLES, split_cursor

from context.assembly import in_file_context
from context.options import AssemblyOptions
from context.session import FileSession


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_language_crops_around_the_enclosing_block(language: str, count_tokens: Callable[[str], int]) -> None:
    filename, marked = SAMPLES[language]
    text, line, column = split_cursor(marked)
    enclosing, helper, unrelated = EXPECTED[language]
    ctx = in_file_context(text, filename, line, column, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=1024, timeout_ms=2000, **CROP_ONLY))
    assert ctx.strategy == "ast", ctx.fallback_reason
    assert ctx.language == language
    # The prefix is the file's text up to the cursor, at its end.
    cursor_offset = sum(len(x) for x in text.splitlines(keepends=True)[:line]) + column
    assert ctx.prefix.endswith(text[max(0, cursor_offset - 40):cursor_offset])
    # The enclosing block is the first reported block, whole.
    first = ctx.blocks[0]
    assert first.name.split(".")[-1] == enclosing
    assert first.form == "whole"
    assert first.start_line <= line <= first.end_line
    # The referenced helper is chosen and ranked before any unreferenced function.
    names = [b.name.split(".")[-1] for b in ctx.blocks]
    assert helper in names, names
    helper_block = ctx.blocks[names.index(helper)]
    assert "referenced" in helper_block.reason
    # The unreferenced function does not rank before the referenced helper: nothing refers to it, and with
    # room for the helper and more it is still not chosen.
    assert unrelated not in names
    assert ctx.context_tokens <= 1024


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_tight_budget_keeps_helper_before_unreferenced(language: str, count_tokens: Callable[[str], int]) -> None:
    filename, marked = SAMPLES[language]
    text, line, column = split_cursor(marked)
    enclosing, helper, unrelated = EXPECTED[language]
    whole = in_file_context(text, filename, line, column, count_tokens=count_tokens,
                            options=AssemblyOptions(timeout_ms=2000, **CROP_ONLY))
    budget = whole.blocks[0].tokens + 60  # the enclosing block and a little more
    ctx = in_file_context(text, filename, line, column, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=budget, timeout_ms=2000, **CROP_ONLY))
    assert ctx.context_tokens <= budget
    chosen = [b.name.split(".")[-1] for b in ctx.blocks]
    assert chosen[0] == enclosing
    # Lower priority may only fill space the referenced helper could not use: the helper is chosen, or was
    # dropped because it did not fit what was left, and the unreferenced function took none of that room.
    dropped = {b.name.split(".")[-1]: b for b in ctx.dropped}
    assert helper in chosen or "does not fit" in dropped[helper].reason
    assert unrelated not in chosen


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_typing_at_the_cursor_keeps_the_excerpts(language: str, count_tokens: Callable[[str], int]) -> None:
    from context.assembly.steady import NOTE

    filename, marked = SAMPLES[language]
    text, line, column = split_cursor(marked)
    session = FileSession("r", filename)
    first = in_file_context(text, filename, line, column, count_tokens=count_tokens, session=session,
                            options=AssemblyOptions(budget_tokens=300, timeout_ms=2000, **CROP_ONLY))
    lines = text.splitlines(keepends=True)
    lines[line] = lines[line][:column] + "val" + lines[line][column:]
    typed = in_file_context("".join(lines), filename, line, column + 3, count_tokens=count_tokens, session=session,
                            options=AssemblyOptions(budget_tokens=300, timeout_ms=2000, **CROP_ONLY))
    assert typed.strategy == "ast" and typed.blocks[0].name == first.blocks[0].name
    assert typed.prefix.startswith(first.prefix[:first.stable_chars]) and typed.prefix.endswith("val")
    assert len(typed.blocks) > 1 and all(NOTE in b.reason for b in typed.blocks[1:])
    assert count_tokens(typed.prefix) + count_tokens(typed.suffix) == typed.context_tokens <= 300
