"""The seam in front of the engine: all the workers ask of one is to complete a prompt, streaming its text,
and to cancel a request nobody waits for. ``CompletionEngine`` says so; the Triton client
(serving/triton_client.py) is the product's engine behind it, serving/scripted_engine.py an in-process one
that the service's unit tests run against. ``complete`` is the one way a worker calls either: it gathers
the stream into a result, times it, and bounds it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ctxpress_core.errors import InferenceTimeout


@dataclass(frozen=True)
class EngineRequest:
    """One prompt for the engine. ``cache_key``: the file the prompt belongs to (the engine keeps its KV);
    ``speculation``: the speculative decoding mode (None: the engine's default); ``request_id``: what
    ``cancel`` names it by; ``deadline_ms``: past it the engine drops the request by itself;
    ``template_markers``: where in ``prompt`` the template put its special tokens (serving.fim.fim_markers):
    the engine reads every other character as text, so a file's own "<|fim_middle|>" cannot steer the model;
    ``cache_salt``: whose earlier prompts the engine may reuse KV from and count as cached (ctxpress_core.inference
    .CTX_CACHE_SALT); ``share``: its user's weight in the engine's shares between users (``CTX_SHARE``)."""

    prompt: str
    max_tokens: int
    temperature: float = 0.0
    stop_words: Sequence[str] = ()
    cache_key: str | None = None
    speculation: str | None = None
    request_id: str | None = None
    deadline_ms: int | None = None
    template_markers: Sequence[int] | None = None
    cache_salt: str | None = None
    share: float = 1.0


@dataclass(frozen=True)
class Piece:
    """One step of the stream: new text, figures (``ctxpress_core.inference.CTX_*``), and why it ended."""

    text: str
    figures: dict[str, int] = field(default_factory=dict)
    finish: str | None = None


@dataclass
class CompletionResult:
    text: str
    finish_reason: str | None = None
    figures: dict[str, int] = field(default_factory=dict)
    first_token_ms: float = 0.0
    total_ms: float = 0.0


class CompletionEngine(Protocol):
    def stream(self, request: EngineRequest) -> AsyncIterator[Piece]:
        """The completion of ``request.prompt``, piece by piece; raises an ``InferenceError`` when it fails."""
        ...

    async def cancel(self, request_id: str) -> bool:
        """Abandon a request (dropped if queued, stopped at its next step if running). True when the engine
        knew it; never raises (a failed cancel leaves the deadline to stop it)."""
        ...


# what ``complete`` waits when a request names no deadline
DEFAULT_DEADLINE_MS = 30_000

_cancels: set[asyncio.Task[bool]] = set()  # cancels on their way (kept referenced)


async def complete(engine: CompletionEngine, request: EngineRequest, *,
                   settled: Callable[[str], bool] | None = None,
                   max_decode_ms: float | None = None) -> CompletionResult:
    """The whole completion of ``request`` within its ``deadline_ms`` (``DEFAULT_DEADLINE_MS`` when it names
    none; the engine is told the deadline too). A call that times out or is cancelled tells the engine, without
    waiting, that nobody reads the answer. ``settled``: told the text so far at each piece that ends a line (or
    may open a fence); once it says nothing further can change what the caller keeps, the engine is told to stop
    and the text so far is the result (finish reason ``stop``). ``max_decode_ms``: once this long has passed
    since the first token, the completion ends at the next piece that ends a line (finish reason ``length``, as
    at the token limit). Both are the caller's reading of the text, not the engine's: they are no request
    fields."""
    deadline_ms = DEFAULT_DEADLINE_MS if request.deadline_ms is None else request.deadline_ms
    request = replace(request, deadline_ms=deadline_ms)
    timeout_s = deadline_ms / 1000
    request_id = request.request_id
    started = time.perf_counter()
    result = CompletionResult(text="")
    pieces: list[str] = []
    stream = engine.stream(request)
    try:
        async with asyncio.timeout(timeout_s):
            async for piece in stream:
                if piece.text and not pieces:
                    result.first_token_ms = (time.perf_counter() - started) * 1000
                if piece.text:
                    pieces.append(piece.text)
                result.figures.update(piece.figures)
                result.finish_reason = piece.finish or result.finish_reason
                if not ("\n" in piece.text or "`" in piece.text):
                    continue
                if settled is not None and settled("".join(pieces)):
                    result.finish_reason = "stop"
                elif (max_decode_ms is not None and "\n" in piece.text
                      and (time.perf_counter() - started) * 1000 - result.first_token_ms > max_decode_ms):
                    result.finish_reason = "length"
                else:
                    continue
                _cancel_later(engine, request_id)
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:  # the engine's stream is closed now, not when collected
                    await aclose()
                break
    except TimeoutError as exc:
        _cancel_later(engine, request_id)
        raise InferenceTimeout(f"no answer from {engine} within {timeout_s:.1f}s") from exc
    except asyncio.CancelledError:
        _cancel_later(engine, request_id)
        raise
    result.text = "".join(pieces)
    result.total_ms = (time.perf_counter() - started) * 1000
    return result


def _cancel_later(engine: CompletionEngine, request_id: str | None) -> None:
    if request_id is None:
        return
    task = asyncio.get_running_loop().create_task(engine.cancel(request_id))
    _cancels.add(task)
    task.add_done_callback(_cancels.discard)
