"""The file's head (stable_head): the same for every cursor in a file, changed only by what it shows."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from context.assemble import assemble_context
from context.model import AssembledContext
from context.options import AssemblyOptions
from context.session import FileSession
from context.sources.file_head import head_items, render_head, take_items
from ctxpress.evaluation.bench import jump_cursors, third_party_root
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.cases import cut_out
from ctxpress_core.settings import DEFAULT_HEAD_SHARE
from syntax.symbols.model import FileSymbols
from syntax.symbols.table import extract_symbols
from syntax.tree_cache import TreeCache

LONG_FILE = third_party_root() / "engine" / "result.py"  # SQLAlchemy, 2,000+ lines
BUDGET = 1024
WIDE = 4096  # a head that outlines classes and their methods, past the imports


def _assemble(text: str, line: int, column: int, count: Callable[[str], int], session: FileSession,
              stable_head: bool = True, budget: int = BUDGET) -> AssembledContext:
    return assemble_context(text, "engine/result.py", line, column, count_tokens=count,
                            options=AssemblyOptions(budget_tokens=budget, timeout_ms=60_000, stable_head=stable_head),
                            session=session)


@pytest.fixture(scope="module")
def cursors() -> list[tuple[str, int, int]]:
    text = LONG_FILE.read_text(encoding="utf-8")
    cases = jump_cursors(LONG_FILE, BenchConfig("nats://unused", "unused", jump_cursors=4))
    assert len(cases) == 4
    return [(cut_out(text, c.line, c.column)[0], c.line, c.column) for c in cases]



def test_every_cursor_of_the_file_gets_the_same_head_first(cursors: list[tuple[str, int, int]],
                                                           count_tokens: Callable[[str], int]) -> None:
    session = FileSession("sqlalchemy", "engine/result.py")
    contexts = [_assemble(text, line, column, count_tokens, session) for text, line, column in cursors]
    heads = {ctx.blocks[0].kind for ctx in contexts}
    assert heads == {"head"}
    tokens = {ctx.blocks[0].tokens for ctx in contexts}
    assert len(tokens) == 1 and 0 < tokens.pop() <= BUDGET * DEFAULT_HEAD_SHARE
    common = min(len(ctx.prefix) for ctx in contexts)
    first = contexts[0].prefix
    shared = next((i for i in range(common) if any(ctx.prefix[i] != first[i] for ctx in contexts)), common)
    head_text = session.head.text if session.head else ""
    assert head_text and shared >= len(head_text)  # the whole head, identical, leads every prompt
    for ctx in contexts:
        assert ctx.context_tokens <= BUDGET
        assert ctx.prefix[len(head_text):].count("from typing import") == 0  # the imports are not repeated
    today = [_assemble(text, line, column, count_tokens, FileSession("r", "p"), stable_head=False)
             for text, line, column in cursors[:2]]
    assert all(ctx.blocks[0].kind != "head" for ctx in today)


def test_an_edit_in_a_body_keeps_the_head_and_an_import_changes_it(cursors: list[tuple[str, int, int]],
                                                                   count_tokens: Callable[[str], int]) -> None:
    text, line, column = cursors[0]
    session = FileSession("sqlalchemy", "engine/result.py")
    before = _assemble(text, line, column, count_tokens, session)
    head = session.head.text if session.head else ""
    lines = text.split("\n")
    lines[line] = lines[line] + "  # typed"  # inside a function body (the cursor's line)
    typed = _assemble("\n".join(lines), line, column, count_tokens, session)
    assert typed.prefix.startswith(head) and before.prefix.startswith(head)
    imported = text.replace("from typing import Any\n", "from typing import Any, Final\n", 1)
    assert imported != text
    changed = _assemble(imported, line, column, count_tokens, session)
    assert not changed.prefix.startswith(head) and "Final" in changed.prefix


def test_a_new_line_typed_in_a_body_keeps_the_head_exactly(cursors: list[tuple[str, int, int]],
                                                           count_tokens: Callable[[str], int]) -> None:
    text, line, column = min(cursors, key=lambda c: c[1])
    session = FileSession("sqlalchemy", "engine/result.py")
    _assemble(text, line, column, count_tokens, session, budget=WIDE)
    before = session.head
    assert before is not None and before.text and before.last_line > line  # the cursor is above its end
    lines = text.split("\n")
    lines[line:line] = ["        x = 1", ""]  # two lines more in a function body above part of the head
    typed = "\n".join(lines)
    _assemble(typed, line + 2, column, count_tokens, session, budget=WIDE)
    after = session.head
    assert after is not None and after.text == before.text
    assert after.last_line == before.last_line + 2  # what it covers moved with the lines
    anew = FileSession("sqlalchemy", "engine/result.py")  # worked out from the edited text, not kept
    _assemble(typed, line + 2, column, count_tokens, anew, budget=WIDE)
    assert anew.head is not None and anew.head.text == before.text


def test_a_signature_edit_changes_the_head_only_at_its_outline_line(cursors: list[tuple[str, int, int]],
                                                                    count_tokens: Callable[[str], int]) -> None:
    text, line, column = cursors[0]
    session = FileSession("sqlalchemy", "engine/result.py")
    _assemble(text, line, column, count_tokens, session, budget=WIDE)
    assert session.head is not None
    head_lines = session.head.text.split("\n")
    # a method's signature in the middle of the head, on one line
    signatures = [s for s in head_lines if s.startswith("    def ") and s.endswith(":") and text.count(s + "\n") == 1]
    assert len(signatures) >= 3
    signature = signatures[len(signatures) // 2]
    edited = signature.replace("(self", "(this", 1)
    assert edited != signature
    _assemble(text.replace(signature + "\n", edited + "\n", 1), line, column, count_tokens, session, budget=WIDE)
    after_lines = session.head.text.split("\n")
    assert len(after_lines) == len(head_lines)
    differ = [(a, b) for a, b in zip(head_lines, after_lines, strict=True) if a != b]
    assert differ == [(signature, edited)]


def _table(text: str) -> FileSymbols:
    return extract_symbols(TreeCache(max_files=1).get("engine/result.py", text, "python"))


def test_a_long_class_fills_the_head_member_by_member(count_tokens: Callable[[str], int]) -> None:
    table = _table(LONG_FILE.read_text(encoding="utf-8"))
    items = list(head_items(table))
    classes = [i for i, item in enumerate(items) if item[0].text.startswith("class ")]
    assert classes and all(len(items[i]) == 1 for i in classes)  # a class's header alone, its members after it
    assert any(items[i + 1][0].text.startswith("    def ") for i in classes if i + 1 < len(items))
    budget = int(BUDGET * DEFAULT_HEAD_SHARE)
    kept, _ = take_items(table, budget, count_tokens)
    head = render_head(kept, "python", LONG_FILE.read_text(encoding="utf-8").split("\n"), budget, count_tokens)
    # With one candidate per class, the first class too long for what the imports left ended the head far short.
    assert head.tokens > 0.9 * budget and head.symbols > 1

