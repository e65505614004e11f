"""How much of each prompt the engine could keep while someone types: ``python -m
benchmarks.prompt_reuse FILE...``.

At a few cursor spots inside functions (where ``ctxpress eval`` puts cursors), the line is typed
again, a request every ``--step`` characters, the rest of the file as it is (so the suffix is the
rest of the function). For each prompt layout it prints the share of each prompt's characters
equal to the previous prompt's start (what a KV cache keyed by prefix can reuse) and the new
characters per request. No engine: the prompts are assembled and compared as text.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from context.assembly import in_file_context
from context.packing.tokens import exact_counter, memoized
from context.session import FileSession
from context.warm import warm_file
from serving.fim import fim_prompt
from syntax.textdiff import common_prefix_len


def bench_file(path: Path, count_tokens, spots: int, step: int, seed: int) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    from ctxpress.evaluation.cases import cursor_spots

    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    session = FileSession("bench", str(path))
    warm_file(session, text, count_tokens=count_tokens)
    rng = random.Random(seed)
    totals: dict[str, list[int]] = {}
    candidates = cursor_spots(path)
    for line, _columns in rng.sample(candidates, min(spots, len(candidates))):
        body = lines[line].rstrip("\r\n")
        indent = len(body) - len(body.lstrip())
        previous: dict[str, str] = {}
        for n in range(indent + 2, len(body) + 1, step):
            typed = body[:n]
            current = "".join([*lines[:line], typed + "\n", *lines[line + 1:]])
            ctx = in_file_context(current, str(path), line, len(typed), count_tokens=count_tokens, session=session)
            cuts = {"prefix-suffix-middle": None, "line_in_middle": ctx.prefix.rfind("\n") + 1,
                    "block_in_middle": ctx.stable_chars if ctx.strategy != "window-fallback" else None}
            for name, cut in cuts.items():
                prompt = fim_prompt(ctx.prefix, ctx.suffix, middle_from=cut)
                if name in previous:
                    same = common_prefix_len(prompt, previous[name])
                    row = totals.setdefault(name, [0, 0, 0])
                    row[0] += same
                    row[1] += len(prompt)
                    row[2] += 1
                previous[name] = prompt
    return {name: {"reused_chars": same, "prompt_chars": chars, "requests": requests}
            for name, (same, chars, requests) in totals.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--spots", type=int, default=6, help="lines retyped per file")
    parser.add_argument("--step", type=int, default=3, help="characters typed between requests")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    from ctxpress_core.settings import get_settings
    from serving.tokenizer import Tokenizer, memoized_counter
    from serving.weights import TARGET, ensure_model

    settings = get_settings()
    tokenizer = Tokenizer(settings.model_path or ensure_model(TARGET, settings.models_dir))
    count = memoized_counter(tokenizer.count)
    exact_counter(memoized(count))
    results = {}
    for i, path in enumerate(args.files, 1):
        results[str(path)] = bench_file(path, count, args.spots, args.step, args.seed)
        print(f"[{i}/{len(args.files)}] {path.name}: " + ", ".join(
            f"{name} {row['reused_chars'] / row['prompt_chars']:.0%}" for name, row in results[str(path)].items()),
            file=sys.stderr)
    summary: dict[str, list[int]] = {}
    for rows in results.values():
        for name, row in rows.items():
            acc = summary.setdefault(name, [0, 0, 0])
            acc[0] += row["reused_chars"]
            acc[1] += row["prompt_chars"]
            acc[2] += row["requests"]
    for name, (same, chars, requests) in summary.items():
        print(f"{name:<22} reused {same / chars:.1%} of the prompt characters, {(chars - same) / requests:.0f} new "
              f"a request ({requests} requests)", file=sys.stderr)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
