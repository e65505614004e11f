"""The product's ``CompletionEngine`` (serving/engine_api.py): an async client for the completion model
behind Triton (gRPC, streaming).

The same code talks to the embedded CPU engine and to a TensorRT-LLM deployment: it only uses the tensor
names of ``ctxpress_core.inference``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from ctxpress_core import inference
from ctxpress_core.errors import InferenceError, InferenceTimeout, InferenceUnavailable
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


def _inputs(prompt: str, max_tokens: int, temperature: float, stop_words: Sequence[str],
            stream: bool, cache_key: str | None = None, speculation: str | None = None,
            request_id: str | None = None, deadline_ms: int | None = None,
            template_markers: Sequence[int] | None = None,
            cache_salt: str | None = None) -> list[grpcclient.InferInput]:
    def make(name: str, dtype: str, value: np.ndarray) -> grpcclient.InferInput:
        tensor = grpcclient.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        return tensor

    tensors = [
        make("text_input", "BYTES", np.array([[prompt.encode("utf-8")]], dtype=object)),
        make("max_tokens", "INT32", np.array([[max_tokens]], dtype=np.int32)),
        make("stream", "BOOL", np.array([[stream]], dtype=bool)),
        make("temperature", "FP32", np.array([[temperature]], dtype=np.float32)),
    ]
    if stop_words:
        words = np.array([[w.encode("utf-8") for w in stop_words]], dtype=object)
        tensors.append(make("stop_words", "BYTES", words))
    if cache_key:
        tensors.append(make(inference.CTX_CACHE_KEY, "BYTES", np.array([[cache_key.encode("utf-8")]], dtype=object)))
    if speculation:
        tensors.append(make(inference.CTX_SPECULATION, "BYTES", np.array([[speculation.encode()]], dtype=object)))
    if request_id:
        tensors.append(make(inference.CTX_REQUEST_ID, "BYTES", np.array([[request_id.encode()]], dtype=object)))
    if deadline_ms is not None:
        tensors.append(make(inference.CTX_DEADLINE_MS, "INT32", np.array([[max(deadline_ms, 1)]], dtype=np.int32)))
    if template_markers is not None:
        tensors.append(make(inference.CTX_TEMPLATE_MARKERS, "INT32",
                            np.array([list(template_markers) or [-1]], dtype=np.int32)))
    if cache_salt:
        tensors.append(make(inference.CTX_CACHE_SALT, "BYTES", np.array([[cache_salt.encode()]], dtype=object)))
    return tensors


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
        tensor = grpcclient.InferInput(inference.CTX_REQUEST_ID, [1], "BYTES")  # the model does not batch
        tensor.set_data_from_numpy(np.array([request_id.encode()], dtype=object))
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
        ok = reply.as_numpy("ok")
        return bool(ok is not None and ok.size and int(ok.reshape(-1)[0]))

    async def stream(self, request: EngineRequest) -> AsyncIterator[Piece]:
        """``CompletionEngine.stream``: Triton's streaming API, which works for decoupled and non-decoupled
        models alike."""
        inputs = _inputs(request.prompt, request.max_tokens, request.temperature, request.stop_words, stream=True,
                         cache_key=request.cache_key, speculation=request.speculation,
                         request_id=request.request_id, deadline_ms=request.deadline_ms,
                         template_markers=request.template_markers, cache_salt=request.cache_salt)

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
                text = ""
                if text_out is not None and text_out.size:
                    text = b"".join(
                        x if isinstance(x, bytes) else str(x).encode() for x in text_out.reshape(-1)
                    ).decode("utf-8", errors="replace")
                figures: dict[str, int] = {}
                for name in _FIGURE_NAMES:
                    value = response.as_numpy(name)
                    if value is not None and value.size and int(value.reshape(-1)[0]) >= 0:
                        figures[name] = int(value.reshape(-1)[0])  # negative: the backend does not know
                finish_raw = response.as_numpy(inference.CTX_FINISH_REASON)
                finish = None
                if finish_raw is not None and finish_raw.size:
                    item = finish_raw.reshape(-1)[0]
                    finish = (item.decode() if isinstance(item, bytes) else str(item)) or None  # "": not the end
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
