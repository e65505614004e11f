"""``ctxpress lsp``'s process: the server (handlers.py) run on stdin and stdout."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

from ctxpress.lsp.handlers import build_server
from ctxpress.lsp.server import CtxpressServer
from ctxpress_core.settings import Settings

HEADER_LIMIT_BYTES = 64 * 1024


def serve(settings: Settings) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # pygls logs every message at INFO (each keystroke's whole change): the editor's log, and the time
    # to write it, would be spent on that
    logging.getLogger("pygls").setLevel(logging.WARNING)
    server = build_server(settings)
    try:
        asyncio.run(_serve_pipes(server))
    except _NotAPipe:
        # stdin is a regular file (``ctxpress lsp < messages``): pygls' own reader, a thread per read
        server.start_io()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        server.shutdown()
    return 0


class _NotAPipe(Exception):
    pass


class _PipeReader:
    """stdin read by the event loop itself. pygls reads it with a thread hop per header line and body
    (four per message), each a wake-up of the loop: a keystroke's two messages cost milliseconds of
    waiting for threads before any work starts."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream

    async def readline(self) -> bytes:
        try:
            return await self._stream.readline()
        except ValueError:  # a "header" line longer than the limit: not a header, dropped
            return b"X-Ignored: line too long\r\n"

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self._stream.readexactly(n)
        except asyncio.IncompleteReadError:
            return b""  # the editor went away mid-message


async def _serve_pipes(server: CtxpressServer) -> None:
    from pygls.io_ import StdoutWriter, run_async

    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=HEADER_LIMIT_BYTES, loop=loop)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream, loop=loop), sys.stdin.buffer)
    except (ValueError, OSError) as exc:
        raise _NotAPipe(str(exc)) from None
    server._stop_event = threading.Event()  # what pygls' shutdown and exit handlers set
    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
    await run_async(stop_event=server._stop_event, reader=_PipeReader(stream), protocol=server.protocol,
                    logger=logging.getLogger("pygls.io"), error_handler=server.report_server_error)
