"""Steady excerpts: typing inside one block keeps the excerpts before it (and the engine's KV of them)."""

from __future__ import annotations

from collections.abc import Callable

from ctx_samples import CROP_ONLY
from longfile import long_python_file

from context.assembly import in_file_context, steady
from context.model import AssembledContext
from context.options import AssemblyOptions
from context.packing.pack import Segment
from context.session import FileSession
from syntax.parsed_file import parse_text
from syntax.symbols.table import extract_symbols

Counter = Callable[[str], int]


def _method(text: str, path: str, min_lines: int = 8, max_lines: int = 40) -> tuple[int, int, int]:
    """A method of the long file of ``min_lines`` to ``max_lines`` lines: (start line, the line of
    its body's second statement, end line)."""
    parsed = parse_text(text, "python", path)
    for sym in extract_symbols(parsed).symbols:
        size = sym.end_line - sym.start_line
        if sym.kind != "method" or not min_lines <= size <= max_lines or sym.start_line < 400:
            continue
        assert sym.body_start_byte is not None
        node = parsed.tree.root_node.descendant_for_byte_range(sym.body_start_byte, sym.body_start_byte)
        while node is not None and node.type != "block":
            node = node.parent
        if node is not None and len(node.named_children) >= 3:
            return sym.start_line, node.named_children[1].start_point[0], sym.end_line
    raise AssertionError("no method found")


def _at(text: str, line: int, column: int) -> str:
    """The file as the IDE sends it while the cursor line is being typed: cut at the column."""
    lines = text.splitlines(keepends=True)
    lines[line] = lines[line][:column] + "\n"
    return "".join(lines)


def _assemble(text: str, path: str, line: int, column: int, count_tokens: Counter, session: FileSession,
              **kw: object) -> AssembledContext:
    return in_file_context(text, path, line, column, count_tokens=count_tokens, session=session,
                           options=AssemblyOptions(timeout_ms=5000, **{**CROP_ONLY, **kw}))  # type: ignore[arg-type]


def _kept(ctx: AssembledContext) -> bool:
    return any(steady.NOTE in b.reason for b in ctx.blocks[1:])


def _real(ctx: AssembledContext, count_tokens: Counter) -> int:
    return count_tokens(ctx.prefix) + count_tokens(ctx.suffix)


def test_typing_on_in_a_block_keeps_the_excerpts_and_renders_the_block_afresh(count_tokens: Counter) -> None:
    path, text = long_python_file()
    start, line, _end = _method(text, path)
    full = text.splitlines(keepends=True)[line].rstrip("\n")
    indent = len(full) - len(full.lstrip())
    session = FileSession("r", path)
    first = _assemble(_at(text, line, indent + 2), path, line, indent + 2, count_tokens, session)
    assert first.strategy == "ast" and not _kept(first)
    later = _assemble(_at(text, line, len(full)), path, line, len(full), count_tokens, session)
    assert _kept(later)
    excerpts = first.prefix[:first.stable_chars]
    assert later.prefix.startswith(excerpts) and later.stable_chars == first.stable_chars
    # the block is the file's own lines from its first line to the cursor, typed text included
    block = "".join(text.splitlines(keepends=True)[start:line]) + full
    assert later.prefix.endswith(block)
    assert _real(later, count_tokens) == later.context_tokens <= later.budget_tokens
    # the report names the same excerpts, at the same lines (nothing moved: the edit added no line)
    assert [(b.kind, b.name, b.start_line) for b in later.blocks[1:]] == \
        [(b.kind, b.name, b.start_line) for b in first.blocks[1:]]


def test_a_new_line_in_the_block_moves_the_report_of_excerpts_below_it(count_tokens: Counter) -> None:
    path, text = long_python_file()
    _start, line, _end = _method(text, path)
    lines = text.splitlines(keepends=True)
    session = FileSession("r", path)
    first = _assemble(text, path, line, 0, count_tokens, session)
    indent = lines[line][: len(lines[line]) - len(lines[line].lstrip())]
    typed = "".join([*lines[:line], indent + "value = 1\n", *lines[line:]])
    later = _assemble(typed, path, line + 1, 0, count_tokens, session)
    assert _kept(later)
    assert later.prefix.startswith(first.prefix[:first.stable_chars])
    for before, after in zip(first.blocks[1:], later.blocks[1:], strict=True):
        assert after.start_line == (before.start_line + 1 if before.start_line > line else before.start_line)


def test_an_edit_outside_the_block_or_another_block_chooses_afresh(count_tokens: Counter) -> None:
    path, text = long_python_file()
    _start, line, end = _method(text, path)
    session = FileSession("r", path)
    _assemble(text, path, line, 0, count_tokens, session)
    lines = text.splitlines(keepends=True)
    edited = "".join(["# a comment added at the top\n", *lines])
    moved = _assemble(edited, path, line + 1, 0, count_tokens, session)
    assert not _kept(moved)
    # back to the edited version's block, then to a line far below it: another block
    _assemble(edited, path, line + 1, 0, count_tokens, session)
    elsewhere = _assemble(edited, path, end + 200, 0, count_tokens, session)
    assert not _kept(elsewhere)


def test_steady_off_chooses_afresh(count_tokens: Counter) -> None:
    path, text = long_python_file()
    _start, line, _end = _method(text, path)
    session = FileSession("r", path)
    _assemble(text, path, line, 0, count_tokens, session, steady_excerpts=False)
    again = _assemble(text, path, line, 4, count_tokens, session, steady_excerpts=False)
    assert not _kept(again)


def test_a_growing_block_cuts_excerpts_from_their_end_within_the_budget(count_tokens: Counter) -> None:
    path, text = long_python_file()
    _start, line, _end = _method(text, path)
    lines = text.splitlines(keepends=True)
    indent = lines[line][: len(lines[line]) - len(lines[line].lstrip())]
    session = FileSession("r", path)
    budget = 600
    previous = _assemble(text, path, line, 0, count_tokens, session, budget_tokens=budget)
    cuts = 0
    for n in range(1, 16):  # a line of code typed at a time into the block
        added = [f"{indent}value_{i} = compute_something(value_{i - 1}, factor={i})\n" for i in range(n)]
        typed = "".join(lines[:line] + added + lines[line:])
        ctx = _assemble(typed, path, line + n, 0, count_tokens, session, budget_tokens=budget)
        assert _real(ctx, count_tokens) == ctx.context_tokens <= budget
        if not _kept(ctx) and ctx.stable_chars == 0:
            break  # nothing left to keep: the block alone fills the budget
        assert _kept(ctx) or ctx.blocks[1:] == []
        old, new = previous.prefix[:previous.stable_chars], ctx.prefix[:ctx.stable_chars]
        assert old.startswith(new)  # cut from the end: the head stays
        cuts += len(new) < len(old)
        previous = ctx
    assert cuts >= 1


def test_lookup_finds_the_changed_lines_and_the_shift() -> None:
    old = "".join(f"line {i}\n" for i in range(20))
    held = steady.Held(text=old, options=("python",), block_name="f", block_start=5, block_end=10,
                       excerpt_text="x\n", segments=[Segment(0, 15, 16, True)], above=-1, blocks=[], dropped=[],
                       outside_edits=frozenset())
    new = old.replace("line 7\n", "line 7\nadded\nadded\n")
    kept = steady.lookup(held, new, ("python",))
    assert kept is not None and kept.delta == 2 and kept.edit_first == 8  # inserted before line 8
    assert steady.shift(15, kept) == 17 and steady.shift(3, kept) == 3
    assert steady.lookup(held, new, ("go",)) is None  # other options
    assert steady.lookup(held, old.replace("line 2\n", "line two\n"), ("python",)) is None
    assert steady.lookup(held, old.replace("line 15\n", "changed\n"), ("python",)) is None
    assert steady.lookup(None, new, ("python",)) is None  # nothing held (or forgotten)


def test_trim_cuts_whole_segments_then_lines_of_a_verbatim_one() -> None:
    text = "# ... (lines 1-9 elided)\ndef a(): ...\n" + "".join(f"row {i}\n" for i in range(10))
    second = text.index("row 0")
    segments = [Segment(0, 9, 9, False), Segment(second, 10, 19, True)]
    count = len  # one token a character is enough to check the arithmetic
    cut, left = steady.trim(text, segments, 12, count)
    assert text.startswith(cut) and len(cut) <= len(text) - 12
    assert left[-1].end_line < 19 and left[-1].start_line == 10
    assert cut.endswith("\n") and "row 0\n" in cut
    everything, none = steady.trim(text, segments, 10_000, count)
    assert everything == "" and none == []
