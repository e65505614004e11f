"""The Triton clients of both models: ``TritonCompletionClient``, the product's ``CompletionEngine``
(serving/engine_api.py), an async client for the completion model (gRPC, streaming); and the embedder's
clients, texts to vectors through the model ``embedder``: ``TritonEmbedder`` (blocking, for the indexing
pipeline, which takes it as its ``indexer.embedder.Embedder``) and ``AsyncTritonEmbedder`` (asyncio, for
query embeddings on the completion path).

The same code talks to the embedded CPU engine and to a TensorRT-LLM deployment: it only uses the tensor
names of ``ctxpress_core.inference``.

Embedder: texts are sorted by length and cut into batches of ``CLIENT_BATCH`` rows: a batch is padded to its
longest text, so similar lengths waste no work, and on CPU small batches run faster per row
(measured: 60 rows/s at 8-16, 55 at 32, 31 at 64 unsorted). Two batches are kept in flight so
Triton always has the next one queued. A GPU deployment would want larger batches: ``CLIENT_BATCH`` is a
constructor argument.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as sync_grpcclient
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from ctxpress_core import inference
from ctxpress_core.errors import EmbeddingError, InferenceError, InferenceTimeout, InferenceUnavailable
from serving.engine_api import EngineRequest, Piece

log = logging.getLogger("ctxpress.triton_client")


_FIGURE_NAMES = (
    inference.CTX_PROMPT_TOKENS,
    inference.CTX_CACHED_TOKENS,
    inference.CTX_COMPLETION_TOKENS,
    inference.CTX_DRAFT_PROPOSED,
    inference.CTX_DRAFT_ACCEPTED,
    inference.CTX_KV_BYTES,
    inference.CTX_RESTORED_TOKENS,
    inference.CTX_RESTORE_MS,
)


def _tensor(name: str, dtype: str, value: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(value.shape), dtype)
    tensor.set_data_from_numpy(value)
    return tensor


def _text(value: str) -> np.ndarray:
    return np.array([[value.encode("utf-8")]], dtype=object)


def _inputs(request: EngineRequest) -> list[grpcclient.InferInput]:
    """The tensors of a streamed request; each optional one only when the request sets it."""
    tensors = [
        _tensor("text_input", "BYTES", _text(request.prompt)),
        _tensor("max_tokens", "INT32", np.array([[request.max_tokens]], dtype=np.int32)),
        _tensor("stream", "BOOL", np.array([[True]], dtype=bool)),
        _tensor("temperature", "FP32", np.array([[request.temperature]], dtype=np.float32)),
    ]
    if request.stop_words:
        words = np.array([[w.encode("utf-8") for w in request.stop_words]], dtype=object)
        tensors.append(_tensor("stop_words", "BYTES", words))
    texts = {inference.CTX_CACHE_KEY: request.cache_key, inference.CTX_SPECULATION: request.speculation,
             inference.CTX_REQUEST_ID: request.request_id, inference.CTX_CACHE_SALT: request.cache_salt}
    tensors += [_tensor(name, "BYTES", _text(value)) for name, value in texts.items() if value]
    if request.deadline_ms is not None:
        deadline = np.array([[max(request.deadline_ms, 1)]], dtype=np.int32)
        tensors.append(_tensor(inference.CTX_DEADLINE_MS, "INT32", deadline))
    if request.share != 1.0:
        tensors.append(_tensor(inference.CTX_SHARE, "FP32", np.array([[request.share]], dtype=np.float32)))
    if request.template_markers is not None:
        markers = np.array([list(request.template_markers) or [-1]], dtype=np.int32)
        tensors.append(_tensor(inference.CTX_TEMPLATE_MARKERS, "INT32", markers))
    return tensors


def _first(result: Any, name: str) -> Any:
    """The first element of output ``name``; None when the result has no such output, or an empty one."""
    value = result.as_numpy(name)
    return value.reshape(-1)[0] if value is not None and value.size else None


class TritonCompletionClient:
    def __init__(self, url: str, model: str = inference.COMPLETION_MODEL) -> None:
        self.url = url
        self.model = model
        self._client = grpcclient.InferenceServerClient(url=url)
        self.cancel_model_missing = False  # a GPU deployment stops on stream cancellation alone

    async def close(self) -> None:
        await self._client.close()

    def __str__(self) -> str:
        return f"Triton at {self.url}"

    async def cancel(self, request_id: str) -> bool:
        """``CompletionEngine.cancel``: through the engine's cancel model."""
        if self.cancel_model_missing:
            return False
        # the model does not batch: a tensor of shape [1]
        tensor = _tensor(inference.CTX_REQUEST_ID, "BYTES", np.array([request_id.encode()], dtype=object))
        try:
            async with asyncio.timeout(5.0):
                reply = await self._client.infer(inference.CANCEL_MODEL, [tensor])
        except InferenceServerException as exc:
            if "unknown model" in str(exc).lower() or "not found" in str(exc).lower():
                self.cancel_model_missing = True
            else:
                log.info("cancel %s: %s", request_id, exc)
            return False
        except Exception as exc:  # unreachable, timed out, or the client closed meanwhile
            log.info("cancel %s not delivered: %s", request_id, exc)
            return False
        ok = _first(reply, "ok")
        return bool(ok is not None and int(ok))

    async def stream(self, request: EngineRequest) -> AsyncIterator[Piece]:
        """``CompletionEngine.stream``: Triton's streaming API, which works for decoupled and non-decoupled
        models alike."""
        inputs = _inputs(request)

        async def requests() -> AsyncIterator[dict[str, object]]:
            yield {"model_name": self.model, "inputs": inputs, "enable_empty_final_response": True}

        try:
            responses = self._client.stream_infer(inputs_iterator=requests())
            async for response, error in responses:
                if error is not None:
                    raise InferenceError(str(error))
                if response is None:
                    continue
                text_out = response.as_numpy("text_output")
                text = b"".join(x if isinstance(x, bytes) else str(x).encode()
                                for x in (() if text_out is None else text_out.reshape(-1))).decode("utf-8", "replace")
                figures = {name: int(value) for name in _FIGURE_NAMES  # negative: the backend does not know
                           if (value := _first(response, name)) is not None and int(value) >= 0}
                item = _first(response, inference.CTX_FINISH_REASON)  # "": not the end
                finish = None if item is None else (item.decode() if isinstance(item, bytes) else str(item)) or None
                yield Piece(text, figures, finish)
                params = response.get_response(as_json=True).get("parameters", {})
                if params.get("triton_final_response", {}).get("bool_param"):
                    break
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise InferenceUnavailable(f"Triton at {self.url} is unavailable: {exc.details()}") from exc
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise InferenceTimeout(f"Triton at {self.url} timed out: {exc.details()}") from exc
            raise InferenceError(f"{exc.code().name}: {exc.details()}") from exc
        except InferenceServerException as exc:
            status = (exc.status() or "").upper()
            if "UNAVAILABLE" in status or "unavailable" in str(exc).lower():
                raise InferenceUnavailable(f"Triton at {self.url} is unavailable: {exc.message()}") from exc
            raise InferenceError(exc.message() or str(exc)) from exc


# -- the embedder ---------------------------------------------------------------------------

CLIENT_BATCH = 16


def _text_inputs(module: object, texts: Sequence[str]) -> list[object]:
    data = np.array([[t.encode("utf-8")] for t in texts], dtype=object)
    tensor = module.InferInput("text", list(data.shape), "BYTES")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(data)
    return [tensor]


def _check_vectors(vectors: np.ndarray | None, n: int) -> np.ndarray:
    if vectors is None or vectors.shape != (n, inference.EMBEDDING_DIM):
        shape = None if vectors is None else vectors.shape
        raise EmbeddingError(f"embedder returned shape {shape}, expected ({n}, {inference.EMBEDDING_DIM})")
    return vectors.astype(np.float32, copy=False)


class TritonEmbedder:
    """Blocking client, for the indexing pipeline (which runs in a worker thread or the CLI)."""

    def __init__(self, url: str, model: str = inference.EMBEDDING_MODEL, timeout_s: float = 120.0,
                 in_flight: int = 2, batch: int = CLIENT_BATCH) -> None:
        self.url = url
        self.batch = max(1, min(batch, inference.EMBEDDING_MAX_BATCH))
        self.model = model
        self.timeout_s = timeout_s
        self.in_flight = max(1, in_flight)
        self._client = sync_grpcclient.InferenceServerClient(url=url)
        self._pool = ThreadPoolExecutor(max_workers=self.in_flight, thread_name_prefix="embed")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()

    def check_ready(self) -> None:
        try:
            ready = self._client.is_model_ready(self.model)
        except InferenceServerException as exc:
            raise EmbeddingError(f"embedder at {self.url} is unavailable: {exc.message()}") from exc
        if not ready:
            raise EmbeddingError(f"Triton at {self.url} has no ready model {self.model!r}")

    def _batch(self, texts: Sequence[str]) -> np.ndarray:
        try:
            result = self._client.infer(self.model, _text_inputs(sync_grpcclient, texts), client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise EmbeddingError(f"embedder at {self.url}: {exc.message()}") from exc
        return _check_vectors(result.as_numpy("embedding"), len(texts))

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, inference.EMBEDDING_DIM), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        size = self.batch
        batches = [[texts[i] for i in order[j : j + size]] for j in range(0, len(order), size)]
        out = np.empty((len(texts), inference.EMBEDDING_DIM), dtype=np.float32)
        done = 0
        for vectors in self._pool.map(self._batch, batches):
            out[order[done : done + len(vectors)]] = vectors
            done += len(vectors)
            if progress:
                progress(len(vectors))
        return out


class AsyncTritonEmbedder:
    """asyncio client, for query embeddings on the completion path."""

    def __init__(self, url: str, model: str = inference.EMBEDDING_MODEL) -> None:
        self.url = url
        self.model = model
        self._client = grpcclient.InferenceServerClient(url=url)

    async def close(self) -> None:
        await self._client.close()

    async def embed(self, texts: Sequence[str], timeout_s: float = 5.0) -> np.ndarray:
        if not texts:
            return np.zeros((0, inference.EMBEDDING_DIM), dtype=np.float32)
        size = inference.EMBEDDING_MAX_BATCH
        try:
            async with asyncio.timeout(timeout_s):
                parts = await asyncio.gather(*(
                    self._client.infer(self.model, _text_inputs(grpcclient, texts[i : i + size]))
                    for i in range(0, len(texts), size)
                ))
        except TimeoutError as exc:
            raise EmbeddingError(f"embedder at {self.url} did not answer within {timeout_s:.2f}s") from exc
        except InferenceServerException as exc:
            raise EmbeddingError(f"embedder at {self.url}: {exc.message()}") from exc
        return np.concatenate([_check_vectors(r.as_numpy("embedding"), min(size, len(texts) - i * size))
                               for i, r in enumerate(parts)])
