"""A NATS client that sends completion requests exactly as an IDE would."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import nats

from ctxpress.settings import nats_servers
from ctxpress.wire.v1 import SUBJECT_COMPLETE, SUBJECT_FILE_OPENED, CompletionRequest, FileOpened


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
    return root.name, root


def request_for_file(path: Path, line: int, column: int, **fields: Any) -> CompletionRequest:
    repository, root = repository_of(path)
    text = path.read_text(encoding="utf-8")
    relative = str(path.resolve().relative_to(root))
    return CompletionRequest(repository=fields.pop("repository", repository), path=relative, text=text,
                             line=line, column=column, **fields)


class CompletionClient:
    def __init__(self, nats_url: str, subject: str = SUBJECT_COMPLETE, timeout_s: float = 120.0,
                 connect_options: dict[str, Any] | None = None) -> None:
        self.nats_url = nats_url
        self.subject = subject
        self.timeout_s = timeout_s
        self.connect_options = connect_options or {}  # team mode: NatsCredentials.connect_options()
        self._nc: nats.NATS | None = None

    async def __aenter__(self) -> CompletionClient:
        self._nc = await nats.connect(nats_servers(self.nats_url), connect_timeout=5, max_reconnect_attempts=3,
                                      **self.connect_options)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._nc is not None:
            await self._nc.close()

    async def send_raw(self, payload: bytes) -> dict[str, Any]:
        assert self._nc is not None, "use `async with CompletionClient(...)`"
        reply = await self._nc.request(self.subject, payload, timeout=self.timeout_s)
        result: dict[str, Any] = json.loads(reply.data)
        return result

    async def complete(self, request: CompletionRequest) -> dict[str, Any]:
        return await self.send_raw(request.model_dump_json(exclude_none=True).encode())

    async def file_opened(self, event: FileOpened) -> dict[str, Any]:
        """Tell the workers a file was opened (they parse it ahead of the first keystroke)."""
        assert self._nc is not None, "use `async with CompletionClient(...)`"
        reply = await self._nc.request(SUBJECT_FILE_OPENED, event.model_dump_json(exclude_none=True).encode(),
                                       timeout=self.timeout_s)
        result: dict[str, Any] = json.loads(reply.data)
        return result
