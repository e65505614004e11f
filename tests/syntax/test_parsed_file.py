"""A parsed file's line and byte arithmetic, and parsing a large source in chunks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from syntax.grammars import get_parser
from syntax.parsed_file import PARSE_CHUNK_BYTES, parse_source, parse_text


def test_cursor_byte_counts_characters_not_bytes() -> None:
    parsed = parse_text("s = 'héllo'\nx = 1\n", "python")
    assert parsed.cursor_byte(0, 7) == len("s = 'hé".encode())
    assert parsed.cursor_byte(1, 99) == len("s = 'héllo'\nx = 1".encode())  # clamped to the line


def test_a_large_source_parsed_in_chunks_gives_the_tree_of_a_whole_parse() -> None:
    # multi-byte characters everywhere, so chunk edges fall inside them
    line = "s_{i} = 'héllo wörld 🙂 ✓' * {i}  # ünïcode\n"
    text = "".join(line.format(i=i) for i in range(PARSE_CHUNK_BYTES // 10))
    source = text.encode("utf-8")
    assert len(source) > 3 * PARSE_CHUNK_BYTES
    chunked = parse_source("python", source)
    whole = get_parser("python").parse(source)
    assert not chunked.root_node.has_error and str(chunked.root_node) == str(whole.root_node)
    edited = source.replace(b"s_7 =", b"s_7x =", 1)
    tree = chunked.copy()
    tree.edit(start_byte=source.index(b"s_7 =") + 3, old_end_byte=source.index(b"s_7 =") + 3,
              new_end_byte=source.index(b"s_7 =") + 4, start_point=(7, 3), old_end_point=(7, 3), new_end_point=(7, 4))
    assert str(parse_source("python", edited, old_tree=tree).root_node) == str(
        get_parser("python").parse(edited).root_node)


async def _loop_ticks_during(parse: Callable[[], object]) -> tuple[int, object]:
    """How many times the event loop ran while ``parse`` ran on a thread, and what it returned."""
    import asyncio
    import time

    ticks: list[float] = []
    span: list[float] = []
    done = False

    def timed() -> object:
        span.append(time.perf_counter())
        result = parse()
        span.append(time.perf_counter())
        return result

    async def ticker() -> None:
        while not done:
            await asyncio.sleep(0)
            ticks.append(time.perf_counter())

    task = asyncio.create_task(ticker())
    result = await asyncio.get_running_loop().run_in_executor(None, timed)
    done = True
    await task
    return sum(1 for t in ticks if span[0] < t < span[1]), result


async def test_parsing_a_large_file_on_a_thread_leaves_the_event_loop_running(monkeypatch: Any) -> None:
    """The parse comes back to Python for every chunk (where the interpreter can hand the GIL to the event loop's
    thread), and the loop runs while it parses. How often the loop runs is the host's scheduling: one whole parse
    let it run 4 to 1,003 times from run to run, so the chunks are counted, not the loop's turns."""
    import syntax.parsed_file as parsed_file

    source = "".join(f"def f{i}(x):\n    return [x + {i} for _ in range(3)]\n\n" for i in range(20_000)).encode()
    reads: list[int] = []
    real = get_parser("python")

    class CountingParser:
        def parse(self, given: Any, *rest: Any) -> Any:
            assert callable(given), "a large source must be read through the callback"

            def counted(offset: int, point: object) -> bytes:
                chunk: bytes = given(offset, point)
                reads.append(len(chunk))
                return chunk

            return real.parse(counted, *rest)

    monkeypatch.setattr(parsed_file, "get_parser", lambda _language: CountingParser())
    ticks, parsed = await _loop_ticks_during(lambda: parse_source("python", source))
    assert not parsed.root_node.has_error  # type: ignore[attr-defined]
    assert len(reads) >= len(source) // PARSE_CHUNK_BYTES and max(reads) <= PARSE_CHUNK_BYTES
    assert sum(reads) >= len(source)
    assert ticks > 0
