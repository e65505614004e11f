"""A NATS client that sends completion requests exactly as an IDE would."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.errors import NoServersError
from nats.errors import TimeoutError as NatsTimeoutError

from ctxpress.unavailable import reason
from ctxpress_core import nats_connect
from ctxpress_core.errors import PartUnavailable
from ctxpress_core.repository_name import repository_name
from ctxpress_core.settings import nats_servers
from ctxpress_core.wire.v1 import SUBJECT_COMPLETE, SUBJECT_FILE_OPENED, CompletionRequest, FileOpened


def repository_of(path: Path) -> tuple[str, Path]:
    """(repository id, repository root) for a file: its git top level, else its folder."""
    folder = path.resolve().parent
    try:
        top = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        root = Path(top)
    except (subprocess.SubprocessError, OSError):
        root = folder
    return repository_name(root), root


def request_for_file(path: Path, line: int, column: int, **fields: Any) -> CompletionRequest:
    repository, root = repository_of(path)
    text = path.read_text(encoding="utf-8")
    relative = str(path.resolve().relative_to(root))
    return CompletionRequest(repository=fields.pop("repository", repository), path=relative, text=text,
                             line=line, column=column, **fields)


# How much longer than the request's deadline the client waits for the worker's answer (which it
# sends at the deadline at the latest).
REPLY_MARGIN_S = 5.0


class CompletionClient:
    def __init__(self, nats_url: str, subject: str = SUBJECT_COMPLETE, timeout_s: float = 120.0,
                 connect_options: dict[str, Any] | None = None, plaintext_credentials: bool = False) -> None:
        """``plaintext_credentials``: the login may go in clear (a credentials file issued without a CA, see
        ``ctxpress_core.nats_connect``)."""
        self.nats_url = nats_url
        self.subject = subject
        self.timeout_s = timeout_s
        self.connect_options = connect_options or {}  # team mode: NatsCredentials.connect_options()
        self.plaintext_credentials = plaintext_credentials
        self._nc: Client | None = None

    async def __aenter__(self) -> CompletionClient:
        # A failure reaches the caller as an exception (PartUnavailable, a request's timeout): nats-py's default
        # callback would also log every failed attempt with its traceback, four before NATS is given up on. The
        # last one says why (refused, timed out, no TLS offered), which NoServersError does not.
        failures: list[Exception] = []

        async def failed(exc: Exception) -> None:
            failures.append(exc)

        options = {"error_cb": failed, **self.connect_options}
        try:
            self._nc = await nats_connect.connect(nats_servers(self.nats_url), connect_timeout=5,
                                                  max_reconnect_attempts=3,
                                                  plaintext_credentials=self.plaintext_credentials, **options)
        except NoServersError as exc:
            cause = failures[-1] if failures else exc
            raise PartUnavailable("NATS", self.nats_url, reason(cause)) from cause
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._nc is not None:
            await self._nc.close()

    async def send_raw(self, payload: bytes, timeout_s: float | None = None) -> dict[str, Any]:
        assert self._nc is not None, "use `async with CompletionClient(...)`"
        reply = await self._nc.request(self.subject, payload, timeout=timeout_s or self.timeout_s)
        result: dict[str, Any] = json.loads(reply.data)
        return result

    async def complete(self, request: CompletionRequest) -> dict[str, Any]:
        """The reply, or an error of the same shape when none came: the worker answers within the
        request's deadline (``timeout_ms``, else its own), so this waits a little longer than that
        and its own timeout means the worker is gone."""
        waits_s = (request.timeout_ms / 1000 if request.timeout_ms else self.timeout_s) + REPLY_MARGIN_S
        try:
            return await self.send_raw(request.model_dump_json(exclude_none=True).encode(), waits_s)
        except NatsTimeoutError:
            return {"error": {"code": "no_reply", "message": f"no reply on {self.subject} within {waits_s:.0f} s"}}

    async def file_opened(self, event: FileOpened) -> dict[str, Any]:
        """Tell the workers a file was opened (they parse it ahead of the first keystroke)."""
        assert self._nc is not None, "use `async with CompletionClient(...)`"
        reply = await self._nc.request(SUBJECT_FILE_OPENED, event.model_dump_json(exclude_none=True).encode(),
                                       timeout=self.timeout_s)
        result: dict[str, Any] = json.loads(reply.data)
        return result
