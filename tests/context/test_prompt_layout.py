"""The prompt's layout: prefix-suffix-middle."""

from __future__ import annotations

from context.prepare import Prepared
from context.prompt import fim_layout
from ctxpress_core.features import resolve
from ctxpress_core.wire.v1 import ContextReport
from serving.fim import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX

EXCERPTS = "import os\n\ndef helper(x):\n    ...\n"
BLOCK = "def f(x):\n    y = helper(x)\n    return y.fo"


def _prepared(stable_chars: int = len(EXCERPTS)) -> Prepared:
    report = ContextReport(strategy="ast", sources=[], file_tokens=0, context_tokens=0)
    return Prepared(EXCERPTS + BLOCK, "\n", report, "python", "0" * 64, resolve(None), stable_chars=stable_chars)


def test_the_prompt_is_prefix_suffix_middle_with_its_markers_where_the_template_puts_them() -> None:
    layout = fim_layout(_prepared())
    assert layout.text == f"{FIM_PREFIX}{EXCERPTS}{BLOCK}{FIM_SUFFIX}\n{FIM_MIDDLE}"
    assert [layout.text[at:at + len(m)] for at, m in zip(layout.markers, (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE),
                                                           strict=True)] == [FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE]
