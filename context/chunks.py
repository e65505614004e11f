"""Cross-file chunks of mode=optimized (feature ``retrieval``): retrieved beside the in-file assembly and
placed between the in-file excerpts and the enclosing block, within what the in-file context left of
the budget; kept, in the file's session, while the user types in one block."""

from __future__ import annotations

from collections.abc import Callable

from context.assembly.steady import NOTE
from context.prepare import Prepared
from context.session import FileSessions, HeldChunks
from context.sources.retrieval import RenderedChunk, Retrieval, Retriever, render_retrieved
from ctxpress_core.wire.v1 import BlockReport, CompletionRequest

KEPT_NOTE = f"; {NOTE}"  # as the in-file excerpts kept with them


class CrossFileChunks:
    def __init__(self, count_tokens: Callable[[str], int], sessions: FileSessions) -> None:
        self.count_tokens = count_tokens
        self.sessions = sessions  # each file's held chunks, and the parse the retrieval query shares

    @staticmethod
    def wanted(features: dict[str, bool]) -> bool:  # the request's (context.prepare.request_features)
        return features.get("retrieval", False)

    async def retrieve(self, retriever: Retriever, request: CompletionRequest, text: str, owner: str | None,
                       repositories: tuple[str, ...]) -> Retrieval:
        """Chunks of the ``repositories`` the owner may read; never raises, and is bounded (see Retriever)."""
        return await retriever.retrieve(repositories=list(repositories), path=request.path, text=text,
                                        line=request.line, language=request.language,
                                        trees=self.sessions.get(request.repository, request.path, owner).trees,
                                        viewer=owner)

    def add(self, prepared: Prepared, retrieval: Retrieval, request: CompletionRequest, owner: str | None) -> None:
        """Other files' chunks go between the in-file excerpts and the enclosing block (which
        stays next to the cursor), within what the in-file context left of the budget. Not
        first: they change with every cursor move, and everything after them in the prompt
        would lose its cached KV. While the user types in one block (the in-file excerpts kept),
        the chunks placed there are kept too when they still fit: a query that follows the typed
        words would change them, and the KV of the block after them, at every keystroke."""
        report = prepared.report
        r = retrieval.report
        report.retrieval = {"elapsed_ms": r.elapsed_ms, "threshold": r.threshold, "returned": r.returned,
                            "coarse_files": r.coarse_files, "unresolved": r.unresolved, "skipped": r.skipped}
        room = (report.budget_tokens or 0) - report.context_tokens
        session = self.sessions.get(request.repository, request.path, owner)  # held for its owner only
        block = (report.blocks[0].name, report.blocks[0].start_line) if report.blocks else ("", -1)
        held = session.take_chunks()
        kept = (prepared.steady and held is not None and held.block == block
                and sum(piece.tokens for piece in held.pieces) <= room)
        if held is not None and kept:
            text, rendered = held.text, held.pieces
        else:
            if not retrieval.chunks or room <= 0:
                return
            text, rendered = render_retrieved(retrieval.chunks, room, self.count_tokens, prepared.language)
            if not rendered:
                return
        session.hold_chunks(HeldChunks(block, text, rendered))
        at = prepared.stable_chars
        prepared.prefix = prepared.prefix[:at] + text + prepared.prefix[at:]
        report.context_tokens += sum(piece.tokens for piece in rendered)
        report.sources = sorted({*report.sources, "retrieval"})
        report.blocks.extend(_block_report(piece, KEPT_NOTE if kept else "") for piece in rendered)


def _block_report(piece: RenderedChunk, note: str) -> BlockReport:
    chunk = piece.chunk
    return BlockReport(kind="retrieved", name=f"{chunk.path}:{chunk.symbol}", start_line=chunk.start_line,
                       end_line=chunk.end_line, form=piece.form, tokens=piece.tokens,
                       reason=f"other file, found by {'+'.join(chunk.found_by)}, score {chunk.score:.3f}{note}")
