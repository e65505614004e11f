"""Does a reply tell one user what another one sent? ``python -m benchmarks.cache_oracle --triton HOST:PORT``
(infra/gpu-check.sh runs it against the TensorRT-LLM deployment; docs/security.md, round 3).

bob sends a prompt twice, then alice sends the same prompt, each through the ensemble as the worker sends it
(serving/triton_client.py, with their own cache salt). bob's repeat must report cached tokens (else the check
proves nothing) and alice's reply none. With ``--engine-salt`` (a repository written with ``ctxpress triton-repo
--engine-cache-salt``) the target engine is also asked directly, with each user's ``cache_salt_id``, how many
blocks it reused: none for alice. Prints one JSON line; exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import secrets
import sys

import numpy as np

from build_engines.triton_models.speculative import cache_salt_id
from build_engines.triton_repo import TARGET
from context.prompt import cache_salt
from ctxpress_core import inference
from serving.engine_api import EngineRequest, complete
from serving.triton_client import TritonCompletionClient


def probe_text(nonce: str, lines: int = 120) -> str:
    """A prompt no earlier request sent (the nonce comes first), long enough for many KV blocks."""
    return f"# {nonce}\n" + "".join(f"def helper_{i}(x):\n    return x * {i} + {len(nonce)}\n\n" for i in range(lines))


def probe_tokens(nonce: int, count: int = 600, vocab: int = 2048) -> list[int]:
    """Token ids for the direct engine check, within any vocabulary of ``vocab`` ids, the first one the nonce."""
    return [nonce % vocab, *((nonce + 7 * i) % (vocab - 1) + 1 for i in range(1, count))]


def problems(figures: dict[str, int | None]) -> list[str]:
    """What the figures show wrong: ``bob_repeat``/``alice`` are the cached tokens the replies reported;
    ``engine_bob_repeat``/``engine_alice`` the engine's own reused blocks (absent: not measured)."""
    found = []
    if not figures.get("bob_repeat"):
        found.append("bob's repeat reported no cached tokens: KV reuse is off, and the check proves nothing")
    if figures.get("alice") is None or figures["alice"] != 0:
        found.append(f"alice was told {figures.get('alice')} cached tokens of bob's prompt (want 0)")
    if "engine_alice" in figures:
        if not figures.get("engine_bob_repeat"):
            found.append("the engine reused no blocks for bob's repeat: the engine check proves nothing")
        if figures["engine_alice"] != 0:
            found.append(f"the engine reused {figures['engine_alice']} of bob's blocks for alice: it ignores "
                         "cache_salt_id")
    return found


async def reported_cached_tokens(client: TritonCompletionClient, text: str, salt: str) -> int | None:
    # keyed by user as the worker keys it (context.prompt.cache_key): the CPU engine scopes its KV pool by that
    result = await complete(client, EngineRequest(text, 4, cache_key=f"cache-oracle:{salt}", speculation="none",
                                                  deadline_ms=60_000, cache_salt=salt))
    return result.figures.get(inference.CTX_CACHED_TOKENS)


def engine_reused_blocks(url: str, tokens: list[int], salt_id: int, timeout_s: float = 60.0) -> int:
    """The target engine's own kv_cache_reused_blocks for one request with this cache_salt_id."""
    import tritonclient.grpc as grpcclient

    def tensor(name: str, value: np.ndarray, dtype: str) -> grpcclient.InferInput:
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        return t

    inputs = [tensor("input_ids", np.array([tokens], dtype=np.int32), "INT32"),
              tensor("input_lengths", np.array([[len(tokens)]], dtype=np.int32), "INT32"),
              tensor("request_output_len", np.array([[1]], dtype=np.int32), "INT32"),
              tensor("return_perf_metrics", np.array([[True]], dtype=bool), "BOOL"),
              tensor("cache_salt_id", np.array([[salt_id]], dtype=np.uint64), "UINT64")]
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(TARGET, inputs, outputs=[grpcclient.InferRequestedOutput(
            "kv_cache_reused_blocks")], enable_empty_final_response=True)
        while True:
            result, error = answers.get(timeout=timeout_s)
            if error is not None:
                raise RuntimeError(str(error))
            reused = result.as_numpy("kv_cache_reused_blocks")  # type: ignore[attr-defined]
            if reused is not None and reused.size:
                return int(reused.reshape(-1)[0])
    finally:
        client.stop_stream()
        client.close()


async def run(url: str, engine_salt: bool, lines: int = 120) -> dict[str, int | None]:
    bob, alice = cache_salt("gpu-check-bob"), cache_salt("gpu-check-alice")
    text = probe_text(secrets.token_hex(8), lines)
    client = TritonCompletionClient(url)
    try:
        figures = {"bob_first": await reported_cached_tokens(client, text, bob),
                   "bob_repeat": await reported_cached_tokens(client, text, bob),
                   "alice": await reported_cached_tokens(client, text, alice)}
    finally:
        await client.close()
    if engine_salt:
        tokens = probe_tokens(secrets.randbelow(1 << 30))
        figures["engine_bob_first"] = engine_reused_blocks(url, tokens, cache_salt_id(bob))
        figures["engine_bob_repeat"] = engine_reused_blocks(url, tokens, cache_salt_id(bob))
        figures["engine_alice"] = engine_reused_blocks(url, tokens, cache_salt_id(alice))
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--triton", default="localhost:8001", help="Triton's gRPC host:port")
    p.add_argument("--engine-salt", action="store_true",
                   help="also check the engine's own reuse (repository written with --engine-cache-salt)")
    a = p.parse_args(argv)
    figures = asyncio.run(run(a.triton, a.engine_salt))
    found = problems(figures)
    print(json.dumps({"figures": figures, "problems": found}))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
