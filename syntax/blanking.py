"""Cursor-line blanking: the bytes the tree of a file being typed in is parsed from.

The cursor line's code is replaced, byte for byte, by spaces or a stand-in that always parses,
so that half-typed code there cannot send tree-sitter's error recovery over the rest of the file
(see ``blank_line_bytes``). Every offset and line number holds in both texts.
"""

from __future__ import annotations

from syntax.parsed_file import ParsedFile


def line_bounds(source: bytes, line: int) -> tuple[int, int] | None:
    """(start, end) bytes of 0-based ``line``, end past its newline; None past the last line."""
    parts = source.split(b"\n", line)  # C speed: a fifth of a find() loop's time
    if len(parts) <= line:
        return None
    start = len(source) - len(parts[-1])
    end = source.find(b"\n", start)
    return start, (end + 1 if end != -1 else len(source))


def blank_line_bytes(source: bytes, start: int, end: int, language: str, in_brackets: bool = False) -> bytes:
    """``source`` with the code of the line at bytes start..end replaced, byte for byte, by spaces
    (so every offset and line number still holds).

    The cursor line is the one being typed: cut mid-expression or inside an unclosed string, it
    sends tree-sitter's error recovery over the rest of the file (measured: 10-50 ms re-parses of
    2,000-5,000-line files, against ~1 ms for a clean one-line edit) and can wreck the structure
    that assembly needs. The line itself is shown from the real text. In Python a statement line
    keeps a one-character statement (``_``): a block still reaches a line that ends it, and
    (measured) tree-sitter re-parses a whitespace-only line's later restoration ~10x slower; a
    line ``in_brackets`` (continuing a call, a literal, an import list) is all spaces, where
    ``_`` would be an error.

    What the line does for the lines around it stays: the brackets it closes for the lines above
    (``)`` ending a call; ``} else {`` in brace languages); in Python a line with a triple quote (a
    docstring's first or last line) is kept whole, and a line opening an indented block stays a
    block header: ``def``/``class`` and clauses like ``except`` as they are, any other as ``if _:``.
    Blanked, those did to the rest of the file what half-typed code does (measured on random
    cursors in SQLAlchemy files: 40-130 ms re-parses at docstring lines, p95 42 -> 8 ms).
    """
    if end > start and source[end - 1 : end] == b"\n":
        end -= 1
    if end > start and source[end - 1 : end] == b"\r":
        end -= 1
    line = source[start:end]
    indent = len(line) - len(line.lstrip(b" \t"))
    width = end - start - indent
    python = language == "python"
    quote, state = _unterminated_triple_quote(source, start, end) if python else (b"", "")
    if width <= 0 and state != "inside":
        return source
    code = line[indent:]
    if python:
        if state == "inside" and end - start >= len(quote):
            # The line is inside a triple-quoted string opened above and never closed (a docstring
            # being typed): the string would run to the end of the file and turn every later
            # string inside out (measured: every request of a docstring typed into a 2,900-line
            # file past the 20 ms budget). Closed at this line, the rest of the file is code again.
            # At the line's start, so that typing on the line only widens the spaces after it.
            return source[:start] + quote + b" " * (end - start - len(quote)) + source[end:]
        if state != "opens" and (b'"""' in code or b"'''" in code):
            return source
    if width <= 0:
        return source
    closers, opened = unmatched_brackets(code, language)
    filler = bytearray(b" " * width)
    if closers:
        # The line ends what lines above opened; in brace languages a ``{`` it opens again
        # (``} else {``) stays too. A line that only opens brackets is blanked: that is how
        # half-typed code looks (``foo(a,``).
        kept = closers if python else closers + [at for at in opened if code[at] == ord("{")]
        for at in kept:
            filler[at] = code[at]
    elif python and not in_brackets:
        if not opened and _indent_of_line_below(source, end) > indent:
            # The next non-blank line is indented deeper: the line opens a block. A declaration keeps
            # its real header (the symbol table needs it), so does a clause that only follows another
            # (an ``except`` alone is an error); any other header, whole or half typed, stands in as
            # ``if _:``, which always parses.
            word = (code.split(None, 1) or [b""])[0].split(b"(", 1)[0].rstrip(b":")
            if word in _PY_KEPT_HEADERS:
                return source
            if width < len(_PY_HEADER):
                if _indent_of_line_above(source, start) >= _indent_of_line_below(source, end):
                    # Too short for a header, and dedented inside a block that goes on below
                    # (``x`` typed at column 0 of an empty line in a method): kept, it would end
                    # the method and the class; blank, the block stays what it was (measured:
                    # 16-21 ms re-parses of a 2,300-line file with it kept).
                    return source[: start + indent] + b" " * width + source[end:]
                return source
            filler[: len(_PY_HEADER)] = _PY_HEADER
        else:
            filler[0] = ord("_")
    return source[: start + indent] + bytes(filler) + source[end:]


def _unterminated_triple_quote(source: bytes, start: int, end: int) -> tuple[bytes, str]:
    """Is the line at ``start..end`` part of a Python triple-quoted string that is never closed?
    ("opens": the line opens it; "inside": a line above did; "": neither.) By parity: a file
    with an odd number of one kind of triple quote has one string left open, and the quotes
    before the line say whether it began before it. Quotes inside other strings or comments
    fool the count; then the line is parsed as before (kept whole when it holds a quote)."""
    for quote in (b'"""', b"'''"):
        total = source.count(quote)
        if total % 2 == 0:
            continue
        in_line = source.count(quote, start, end)
        before = source.count(quote, 0, start)
        if in_line % 2 == 1 and before % 2 == 0:
            return quote, "opens"
        if in_line == 0 and before % 2 == 1:
            return quote, "inside"
    return b"", ""


_PY_HEADER = b"if _:"
_PY_KEPT_HEADERS = frozenset({b"def", b"class", b"async", b"except", b"except*", b"finally", b"case"})


_OPENERS = frozenset(b"([{")
_CLOSERS = frozenset(b")]}")


def unmatched_brackets(code: bytes, language: str) -> tuple[list[int], list[int]]:
    """Offsets in ``code`` of closing brackets whose opener is on an earlier line, and of the
    brackets the line leaves open; string literals and Python comments skipped (escapes across
    lines and multi-line strings are not worth a tokenizer here)."""
    opened: list[int] = []
    closers: list[int] = []
    quote, i = 0, 0
    while i < len(code):
        ch = code[i]
        if quote:
            if ch == 92:  # backslash
                i += 1
            elif ch == quote:
                quote = 0
        elif ch in (34, 39):  # " '
            quote = ch
        elif ch == 35 and language == "python":  # '#'
            break
        elif ch in _OPENERS:
            opened.append(i)
        elif ch in _CLOSERS:
            if opened:
                opened.pop()
            else:
                closers.append(i)
        i += 1
    return closers, opened


def _indent_of_line_above(source: bytes, start: int) -> int:
    """Indentation of the nearest non-blank line before the line starting at ``start`` (-1: none)."""
    end = start - 1
    while end > 0:
        begin = source.rfind(b"\n", 0, end) + 1
        line = source[begin:end]
        if line.strip():
            return len(line) - len(line.lstrip(b" \t"))
        end = begin - 1
    return -1


def _indent_of_line_below(source: bytes, end: int) -> int:
    """Indentation of the nearest non-blank line after the line ending at ``end`` (-1: none)."""
    pos = source.find(b"\n", end)
    while pos != -1:
        nxt = source.find(b"\n", pos + 1)
        following = source[pos + 1 : nxt if nxt != -1 else len(source)]
        if following.strip():
            return len(following) - len(following.lstrip(b" \t"))
        pos = nxt
    return -1


# Python nodes whose lines after the first continue one logical line.
_PY_BRACKETS = frozenset({
    "argument_list", "parenthesized_expression", "list", "dictionary", "set", "tuple", "subscript",
    "parameters", "list_comprehension", "dictionary_comprehension", "set_comprehension",
    "generator_expression", "import_from_statement", "type_parameter", "string",
})
_CONTINUES = (b"(", b"[", b"{", b",", b"\\")


def continues_line(versions: tuple[ParsedFile | None, ...], source: bytes, start: int) -> bool:
    """Does the Python line at ``start`` continue the logical line above it? From the tree of the
    first of ``versions`` (the previous one, then the one the file was opened at) in which
    everything up to this line is as it is now (the usual case: the same line typed on, the first
    keystroke after the file was opened, a new cursor in a file unchanged since), else from the text."""
    for version in versions:
        if version is None or start > len(version.parsed_bytes) or version.parsed_bytes[:start] != source[:start]:
            continue
        node = version.tree.root_node.descendant_for_byte_range(start, start)
        while node is not None:
            if node.type in _PY_BRACKETS and node.start_byte < start:
                return True
            node = node.parent
        return False
    above = source[:start].rstrip()
    return above.endswith(_CONTINUES) or source[start:start + 200].lstrip()[:1] in (b")", b"]", b"}")
