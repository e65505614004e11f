"""The entry point of the context library: ``ContextLibrary.build_prompt(request, file_view, retriever)``, the
prompt of one completion request, straight through: what the request settles once (its features, budget and
language: context/prepare.py), the file's in-file context (context/assembly/), the cross-file chunks beside it
when the request wants them, then the prompt's fill-in-the-middle layout, the engine's KV key and the
speculation mode. Whoever calls it (the NATS worker, a benchmark) owns the file's text and the reader's grants;
the library owns each file's session."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass

from context import prompt
from context.assembly import in_file_context
from context.chunks import CrossFileChunks
from context.prepare import Prepared, prepared, request_features, settle
from context.session import FileSessions
from context.sources.retrieval import Retrieval, Retriever
from context.sources.window import MAX_LINE_CHARS
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest

# A planned prompt's window starts on a line that is a multiple of this: at ~10 tokens a line, a 256-token plan's
# prefix shows 4 lines fewer on average, and the start stays put while ~8 lines' worth is typed.
PLANNED_WINDOW_GRID = 8


@dataclass(frozen=True)
class FileView:
    """The file a request is about, as its reader sees it: one version of its text, and whose view it is
    (``owner``: the user in team mode, None on the single-user appliance) with the repositories they may read
    (cross-file chunks come from those only)."""

    text: str
    digest: str
    owner: str | None
    repositories: tuple[str, ...]
    account: str | None = None  # whose engine cache it fills: workers.grants.Caller.kv_owner (None: the owner)


@dataclass(frozen=True)
class Prompt:
    """What the engine is sent for a request, and the prepared context it came from (for the reply)."""

    layout: prompt.Layout
    prepared: Prepared
    cache_key: str | None
    speculation: str
    cache_salt: str  # whose KV it may reuse (prompt.cache_salt)


class ContextLibrary:
    """One per worker: its settings, token counter and model, and the sessions of the files it has seen."""

    def __init__(self, settings: Settings, count_tokens: Callable[[str], int], model_name: str) -> None:
        self.settings = settings
        self.count_tokens = count_tokens
        self.model_name = model_name
        # per (owner, repository, path): its parsed versions, steady excerpts and held cross-file chunks
        self.sessions = FileSessions()
        self.chunks = CrossFileChunks(count_tokens, self.sessions)
        secret = settings.cache_salt_secret
        self._salt_secret = secret.get_secret_value().encode() if secret is not None else None

    def cache_salt(self, owner: str | None) -> str:
        return prompt.cache_salt(owner, self._salt_secret)

    def cache_key(self, request: CompletionRequest, view: FileView) -> str | None:
        """The engine's KV key ``build_prompt`` would give the request's prompt, without building it."""
        return prompt.cache_key(self.model_name, request, request_features(request), view.account or view.owner)

    async def build_prompt(self, request: CompletionRequest, view: FileView, retriever: Retriever | None,
                           window_grid: int = 1) -> Prompt:
        """CPU-bound steps run in the loop's default executor; retrieval (never raises, bounded) beside the in-file
        context. The session's steady excerpts are its owner's own. ``window_grid``: a window's first line is a
        multiple of it (in_file_context)."""
        loop = asyncio.get_running_loop()
        settled = await loop.run_in_executor(None, settle, request, view.text, self.settings)
        session = self.sessions.get(request.repository, request.path, view.owner) if settled.crop else None
        in_file = loop.run_in_executor(None, functools.partial(
            in_file_context, settled.text, request.path, request.line, settled.column, count_tokens=self.count_tokens,
            options=settled.options, crop=settled.crop, session=session, window_lines=self.settings.window_lines,
            window_grid=window_grid))
        retrieval: Retrieval | None = None
        # nor retrieval for lines too long to parse: every pass over such a line costs in proportion to its length
        if retriever is None or settled.longest_line > MAX_LINE_CHARS or not self.chunks.wanted(settled.features):
            ctx = await in_file
        else:
            ctx, retrieval = await asyncio.gather(
                in_file, self.chunks.retrieve(retriever, request, view.text, view.owner, view.repositories))
        built = prepared(ctx, settled, view.digest)
        if retrieval is not None:
            await loop.run_in_executor(None, self.chunks.add, built, retrieval, request, view.owner)
        return Prompt(prompt.fim_layout(built), built,
                      prompt.cache_key(self.model_name, request, built.features, view.account or view.owner),
                      prompt.speculation(request, built.features), self.cache_salt(view.account or view.owner))

    async def build_smaller(self, request: CompletionRequest, view: FileView, retriever: Retriever | None,
                            budget_tokens: int) -> Prompt:
        """The prompt of ``request`` within ``budget_tokens`` (a plan smaller than its budget): the window around
        the cursor (feature ``crop`` off), which at a plan's few hundred tokens scores better than the assembly's
        excerpts (docs/measurements/latency.md), its first line on a grid of ``PLANNED_WINDOW_GRID`` lines: the
        planned prompts of a developer typing on start alike, and the engine processes only what changed. The
        file's session is left as the full prompt's build left it:
        the full prompt is the one filled in behind the answer, and the next keystroke's keeps its steady excerpts
        and held chunks."""
        session = self.sessions.get(request.repository, request.path, view.owner)
        state = session.state()
        smaller = request.model_copy(update={"budget_tokens": budget_tokens,
                                             "features": {**(request.features or {}), "crop": False}})
        try:
            return await self.build_prompt(smaller, view, retriever, window_grid=PLANNED_WINDOW_GRID)
        finally:
            session.restore(state)
