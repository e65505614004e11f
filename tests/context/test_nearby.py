"""Nearby lines: the code just above the enclosing block, verbatim, filling the budget left over."""

from __future__ import annotations

from collections.abc import Callable

from ctx_samples import CROP_ONLY

from context.assembly import in_file_context
from context.options import AssemblyOptions

Counter = Callable[[str], int]


def _method(i: int, body_lines: int) -> str:
    body = "".join(f"        total_{i} += self.weights[{k}] * {k}\n\n" for k in range(body_lines))
    return (f"    def step_{i}(self, x: int) -> int:\n"
            f"        total_{i} = x\n{body}"
            f"        return total_{i}\n\n")


def _source(methods: int, body_lines: int) -> str:
    head = "class Model:\n    weights: list[int]\n\n"
    return head + "".join(_method(i, body_lines) for i in range(methods)) + (
        "    def target(self, x: int) -> int:\n        y = self.step_0(x)\n        return y\n")


def _cursor(text: str) -> tuple[int, int]:
    lines = text.splitlines()
    line = next(i for i, s in enumerate(lines) if s.strip() == "y = self.step_0(x)")
    return line, 8


def test_lines_above_the_enclosing_block_fill_the_budget_verbatim(count_tokens: Counter) -> None:
    text = _source(methods=6, body_lines=3)
    line, column = _cursor(text)
    ctx = in_file_context(text, "model.py", line, column, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=1024, timeout_ms=2000, **CROP_ONLY))
    # The method just above the cursor's is in the prompt as real code, not as a signature.
    assert _method(5, 3) in ctx.prefix
    nearby = [b for b in ctx.blocks if b.kind == "nearby"]
    assert len(nearby) == 1 and nearby[0].end_line == line - 2
    assert ctx.context_tokens <= 1024


def test_a_partial_excerpt_starts_at_a_statement_and_shows_whose_body_it_is(count_tokens: Counter) -> None:
    text = _source(methods=2, body_lines=60)  # each sibling far larger than the budget left
    line, column = _cursor(text)
    ctx = in_file_context(text, "model.py", line, column, count_tokens=count_tokens,
                          options=AssemblyOptions(budget_tokens=400, timeout_ms=2000, **CROP_ONLY))
    assert ctx.context_tokens <= 400
    nearby = [b for b in ctx.blocks if b.kind == "nearby"]
    assert nearby, ctx.dropped
    # The nearest sibling's signature, an elision, then the tail of its body up to the cursor's block.
    assert "    def step_1(self, x: int) -> int:\n        # ... (lines" in ctx.prefix
    assert "        return total_1\n" in ctx.prefix
    assert "    def step_0(self, x: int) -> int:\n" in ctx.prefix  # referenced: a summary elsewhere


def test_no_line_is_shown_twice_when_a_summary_and_real_lines_overlap(count_tokens: Counter) -> None:
    text = _source(methods=8, body_lines=4)
    line, column = _cursor(text)
    for budget in (256, 512, 1024, 2048):
        ctx = in_file_context(text, "model.py", line, column, count_tokens=count_tokens,
                              options=AssemblyOptions(budget_tokens=budget, timeout_ms=2000, **CROP_ONLY))
        shown = [s for s in ctx.prefix.splitlines() if s.strip() and not s.strip().startswith("#")]
        defs = [s for s in shown if s.lstrip().startswith("def ")]
        assert len(defs) == len(set(defs)), (budget, defs)
        assert ctx.context_tokens <= budget
