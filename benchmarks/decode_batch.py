"""What decoding several files' sequences in one llama.cpp batch would save on this machine:
``python -m benchmarks.decode_batch``.

Fills each of the engine's KV sequences with ~``--cells`` tokens of third-party code, then times
decode steps of one token in each of a set of sequences, one ``llama_decode`` a step, against a
step of one sequence alone. Prints the cost of a step and of a token per set, and one JSON line.
This is the measurement behind not building continuous batching for the CPU engine
(docs/inference.md, Admission).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from serving.engine.cpu_engine import LlamaEngine
from serving.engine.engine_config import EngineConfig

SETS = ((0,), (0, 1), (0, 1, 2), (0, 1, 2, 3), (0, 2))  # (0, 2): slots that are not adjacent


def third_party_text() -> str:
    import sqlalchemy.orm.session as module

    assert module.__file__ is not None
    return Path(module.__file__).read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_batch", description=__doc__)
    parser.add_argument("--model", type=Path, help="GGUF file (default: the packaged target model)")
    parser.add_argument("--cells", type=int, default=900, help="tokens already in each sequence")
    parser.add_argument("--steps", type=int, default=8, help="decode steps timed per set and round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.model is None:
        from ctxpress_core.settings import get_settings
        from serving.weights import TARGET, ensure_model

        args.model = ensure_model(TARGET, get_settings().models_dir)
    engine = LlamaEngine(EngineConfig(model_path=args.model, n_ctx=args.cells + args.steps * args.rounds * 8 + 64,
                                      n_slots=4))
    runner, text = engine.target, third_party_text()
    position: dict[int, int] = {}
    for seq in range(4):
        tokens = engine.tokenize(text[seq * 6000:(seq + 1) * 6000])[: args.cells]
        runner.decode(seq, tokens, 0, all_logits=False)
        position[seq] = len(tokens)
    batch = runner.batch.batch
    results: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        for seqs in SETS:
            started = time.perf_counter()
            for _ in range(args.steps):
                batch.n_tokens = len(seqs)
                for i, seq in enumerate(seqs):
                    batch.token[i], batch.pos[i] = 1000 + i, position[seq]
                    batch.seq_id[i][0], batch.n_seq_id[i], batch.logits[i] = seq, 1, True
                    position[seq] += 1
                runner.ctx.decode(runner.batch)
            ms = (time.perf_counter() - started) * 1000 / args.steps
            results.setdefault(",".join(map(str, seqs)), []).append(ms)
            print(f"round {round_ + 1}: sequences {seqs}: {ms:.0f} ms a step, {ms / len(seqs):.0f} ms a token",
                  file=sys.stderr)
    alone = min(results["0"])
    summary = {key: {"step_ms": min(v), "token_ms": min(v) / len(key.split(",")),
                     "saving_vs_one_at_a_time": 1 - min(v) / (alone * len(key.split(",")))}
               for key, v in results.items()}
    for key, row in summary.items():
        print(f"sequences {key}: {row['step_ms']:.0f} ms a step, {row['token_ms']:.0f} ms a token, "
              f"{row['saving_vs_one_at_a_time']:.0%} less than one at a time")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
