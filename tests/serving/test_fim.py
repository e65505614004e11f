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


def test_a_middle_opened_by_the_prefix_keeps_everything_before_the_typed_text_while_typing() -> None:
    prefix = "def f(x):\n    y = x\n    return y.fo"
    cut = prefix.rfind("\n") + 1  # the cursor line opens the middle
    prompt = fim_prompt(prefix, "\n\nz = 1", middle_from=cut)
    assert prompt == f"{FIM_PREFIX}def f(x):\n    y = x\n{FIM_SUFFIX}\n\nz = 1{FIM_MIDDLE}    return y.fo"
    typed_on = fim_prompt(prefix + "rmat(", "\n\nz = 1", middle_from=cut)
    assert typed_on.startswith(prompt)  # only the new characters are new to the engine
    assert fim_prompt("x = 1", "", middle_from=0) == f"{FIM_PREFIX}{FIM_SUFFIX}{FIM_MIDDLE}x = 1"
