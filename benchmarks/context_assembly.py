"""Time context assembly alone on real files: ``python -m benchmarks.context_assembly FILE...``.

Default: the file was opened (parsed once), then each request is one keystroke at a random
cursor somewhere in the file (a stress test: every request a new spot, any line, any column,
including inside a line's indentation or a closing triple quote). ``--eval-cursors``: each request
a new spot too, but shaped as the eval's cases and a completion request are: a cursor where
``ctxpress eval`` would put one (a token boundary in a function body) and the rest of that line cut
off. ``--typing``: keystrokes in sequence at a few spots, the steady state while someone types.
Prints the median and p95 of assembly time per file with the model's own tokenizer (memoised,
as in the worker), and the compression against the whole file.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from context.assembly import in_file_context
from context.options import AssemblyOptions
from context.packing.tokens import exact_counter, memoized
from context.session import FileSession
from context.warm import warm_file


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _stages(per_request: list[dict[str, float]]) -> dict[str, float]:
    """p95 of each assembly stage's wall time, over the requests that ran it."""
    names = {name for timings in per_request for name in timings}
    return {name: round(_percentile([t[name] for t in per_request if name in t], 95), 2) for name in sorted(names)}


def _measure(session: FileSession, lines: int, requests: Iterable[tuple[str, int, int]], count_tokens,  # type: ignore[no-untyped-def]
             options: AssemblyOptions, compression: bool = True) -> dict[str, float]:
    """Assemble each (text, line, column) request in the file's session; the timing row of one file."""
    times, ratios, fallbacks = [], [], 0
    stages: list[dict[str, float]] = []
    for text, line, column in requests:
        ctx = in_file_context(text, session.path, line, column, count_tokens=count_tokens,
                              options=options, session=session)
        times.append(ctx.elapsed_ms)
        stages.append(ctx.timings_ms)
        fallbacks += ctx.strategy == "window-fallback"
        if ctx.context_tokens:
            ratios.append(ctx.file_tokens / ctx.context_tokens)
    row = {"file": session.path, "lines": lines, "requests": len(times), "median_ms": statistics.median(times),
           "p95_ms": _percentile(times, 95), "max_ms": max(times), "fallbacks": fallbacks,
           "stage_p95_ms": _stages(stages)}
    if compression:
        row["compression_median"] = statistics.median(ratios) if ratios else 0.0
    return row


def bench_file(path: Path, count_tokens, requests: int, options: AssemblyOptions, seed: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    rng = random.Random(seed)
    session = FileSession("bench", str(path))
    warm_file(session, text, count_tokens=count_tokens)

    def keystrokes() -> Iterator[tuple[str, int, int]]:
        for _ in range(requests):
            line = rng.randrange(len(lines))
            body = lines[line].rstrip("\r\n")
            column = rng.randint(0, len(body))
            # one keystroke: a character typed at the cursor
            edited = [*lines[:line], body[:column] + "x" + body[column:] + lines[line][len(body):], *lines[line + 1:]]
            yield "".join(edited), line, column + 1

    return _measure(session, len(lines), keystrokes(), count_tokens, options)


def bench_eval_cursors(path: Path, count_tokens, requests: int, options: AssemblyOptions,  # type: ignore[no-untyped-def]
                       seed: int) -> dict[str, float]:
    """Each request a new cursor of the kind the eval picks, with the rest of its line cut."""
    from ctxpress.evaluation.cases import cursor_spots, cut_out

    text = path.read_text(encoding="utf-8")
    spots = cursor_spots(path)
    rng = random.Random(seed)
    session = FileSession("bench", str(path))
    warm_file(session, text, count_tokens=count_tokens)

    def cursors() -> Iterator[tuple[str, int, int]]:
        for _ in range(requests):
            line, columns = rng.choice(spots)
            column = rng.choice(columns)
            yield cut_out(text, line, column)[0], line, column

    return _measure(session, len(text.splitlines()), cursors(), count_tokens, options)


def bench_typing(path: Path, count_tokens, spots: int, chars: int, options: AssemblyOptions,  # type: ignore[no-untyped-def]
                 seed: int) -> dict[str, float]:
    """The steady state while someone types: at each of ``spots`` lines inside functions, the
    line is typed again character by character (``chars`` keystrokes), one assembly per keystroke."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    rng = random.Random(seed)
    session = FileSession("bench", str(path))
    warm_file(session, text, count_tokens=count_tokens)
    candidates = [i for i, ln in enumerate(lines) if ln.startswith("        ") and len(ln.strip()) > 20]

    def keystrokes() -> Iterator[tuple[str, int, int]]:
        for line in rng.sample(candidates, min(spots, len(candidates))):
            body = lines[line].rstrip("\r\n")
            indent = len(body) - len(body.lstrip())
            for n in range(min(chars, len(body) - indent) + 1):
                typed = body[:indent + n]
                yield "".join([*lines[:line], typed + "\n", *lines[line + 1:]]), line, len(typed)

    return _measure(session, len(lines), keystrokes(), count_tokens, options, compression=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--typing", action="store_true",
                        help="keystrokes typed in sequence at a few spots (the steady state) instead of random jumps")
    parser.add_argument("--eval-cursors", action="store_true",
                        help="each request a new cursor where the eval puts one, the rest of its line cut")
    args = parser.parse_args()
    options = AssemblyOptions(budget_tokens=args.budget, timeout_ms=1000.0)
    from ctxpress_core.settings import get_settings
    from serving.tokenizer import Tokenizer, memoized_counter
    from serving.weights import TARGET, ensure_model

    settings = get_settings()
    tokenizer = Tokenizer(settings.model_path or ensure_model(TARGET, settings.models_dir))
    count = memoized_counter(tokenizer.count)  # as in the worker
    exact_counter(memoized(count))  # its one-time self-check, as the worker does at start-up
    rows = []
    for path in args.files:
        if args.typing:
            row = bench_typing(path, count, max(1, args.requests // 20), 20, options, args.seed)
        elif args.eval_cursors:
            row = bench_eval_cursors(path, count, args.requests, options, args.seed)
        else:
            row = bench_file(path, count, args.requests, options, args.seed)
        rows.append(row)
        print(f"{path.name:<28} {row['lines']:>6} lines  median {row['median_ms']:6.2f} ms  "
              f"p95 {row['p95_ms']:6.2f} ms  max {row['max_ms']:6.1f} ms  fallbacks {row['fallbacks']}"
              + (f"  compression {row['compression_median']:.1f}:1" if "compression_median" in row else ""),
              file=sys.stderr)
        print("    stage p95 ms: " + ", ".join(f"{k} {v}" for k, v in row["stage_p95_ms"].items()), file=sys.stderr)
    print(json.dumps({"files": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
