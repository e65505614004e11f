"""Start, stop and inspect the embedded parts of the appliance.

Each part runs as its own detached process (own session, so one signal reaches its
children too) with a pid file and a log under ``<home>/run`` and ``<home>/logs``.
``ctxpress up`` can therefore return while the parts keep running, and ``ctxpress
down`` finds them again from any shell. A part whose URL setting points elsewhere is
external: we only check that it answers.

One module per part (``nats_server``, ``postgres``, ``triton``, ``workers``, ``supervisor``) over
``base.Part``; ``lifecycle`` holds ``up`` and ``down``; here, the parts in start order and how long
each may take to be ready.
"""

from __future__ import annotations

from ctxpress.parts.base import Part
from ctxpress.parts.console import ConsolePart, console_wanted
from ctxpress.parts.nats_server import NatsPart
from ctxpress.parts.postgres import PostgresPart
from ctxpress.parts.triton import TritonPart
from ctxpress.parts.workers import CompletionWorkerPart, IndexWorkerPart
from ctxpress_core.settings import Settings


def parts(settings: Settings) -> list[Part]:
    """In start order."""
    found = [NatsPart(settings), PostgresPart(settings), TritonPart(settings), CompletionWorkerPart(settings),
             IndexWorkerPart(settings)]
    return [*found, ConsolePart(settings)] if console_wanted(settings) else found


START_TIMEOUTS = {"nats": 30.0, "postgres": 120.0, "triton": 300.0, "completion-worker": 120.0, "index-worker": 60.0,
                  "console": 30.0,
                  "supervisor": 30.0}
