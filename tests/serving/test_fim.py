"""Prompt layouts: prefix-suffix-middle, and suffix-first so the suffix's KV survives typing."""

from __future__ import annotations

from serving.fim import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, fim_prompt


def test_psm_and_spm_layouts() -> None:
    assert fim_prompt("a = ", "\nb") == f"{FIM_PREFIX}a = {FIM_SUFFIX}\nb{FIM_MIDDLE}"
    assert fim_prompt("a = ", "\nb", suffix_first=True) == f"{FIM_SUFFIX}\nb{FIM_PREFIX}a = {FIM_MIDDLE}"


def test_suffix_first_keeps_the_head_of_the_prompt_while_typing() -> None:
    before = fim_prompt("x = fo", "\nreturn x", suffix_first=True)
    after = fim_prompt("x = foo", "\nreturn x", suffix_first=True)
    common = next(i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b)
    assert common == len(before) - len(FIM_MIDDLE)  # only the typed character and the marker move
