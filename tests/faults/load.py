"""The bounded load the fault tests run while they kill a part: a few editors asking for completions in a
loop, and commits in a git repository whose hooks publish index events.

Every completion request carries a deadline (``timeout_ms``) and the client waits for it through NATS with
the same timeout; ``asyncio.wait_for`` with a margin above it is what would catch a request that hangs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest
from tests.indexer.index_repo import git

# Each request's timeout_ms: past it the worker answers inference_timeout. Generous: the engine shares two cores
# with everything else on the machine, and a deadline shorter than a request's time there would leave the
# editors timing out for ever (the engine abandons each request at its deadline).
DEADLINE_S = 45.0
# The worker answers inference_timeout at the deadline; its reply may take a moment more to arrive on a busy
# machine, and a client that gave up first would miss it. Past this, no reply came: the request was lost.
REPLY_SLACK_S = 5.0
HANG_MARGIN_S = 15.0  # no outcome this long after the deadline: the request hangs
MAX_REQUESTS_PER_EDITOR = 200
MAX_COMMITS = 120
COMMIT_EVERY_S = 1.5

EDITED_FILE = '''"""Prices, discounts and taxes."""

from decimal import Decimal

VAT_RATE = Decimal("0.20")


def apply_discount(amount: Decimal, percent: int) -> Decimal:
    """Reduce an amount by a whole percentage."""
    return amount * (100 - percent) / 100


def order_total(prices: list[Decimal]) -> Decimal:
    """Sum of the prices with VAT."""
    subtotal = sum(prices)
    return
'''


@dataclass
class Outcome:
    started: float  # monotonic
    ended: float
    kind: str  # "answered", "error:<code>", "no responder", "no reply", "connection lost", "hung"

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def classify(data: bytes) -> str:
    try:
        reply = json.loads(data)
    except ValueError:
        return "unreadable reply"
    if "error" in reply:
        return f"error:{reply['error'].get('code')}"
    return "answered" if "completion" in reply else "unreadable reply"


def good_request(index: int) -> bytes:
    lines = EDITED_FILE.split("\n")
    line = len(lines) - 2  # after `return`
    return CompletionRequest(repository="faults", path=f"shop/pricing_{index}.py", text=EDITED_FILE, line=line,
                             column=len(lines[line]), max_tokens=8, timeout_ms=int(DEADLINE_S * 1000),
                             scenario="faults").model_dump_json(exclude_none=True).encode()


async def ask(nc: nats.NATS, subject: str, payload: bytes) -> Outcome:
    started = time.monotonic()
    try:
        reply = await asyncio.wait_for(nc.request(subject, payload, timeout=DEADLINE_S + REPLY_SLACK_S),
                                       DEADLINE_S + HANG_MARGIN_S)
        kind = classify(reply.data)
    except NoRespondersError:
        kind = "no responder"
    except NatsTimeout:  # nats' own: the deadline (and the slack) passed without a reply
        kind = "no reply"
    except TimeoutError:  # wait_for: past the deadline and the margin
        kind = "hung"
    except ConnectionClosedError:
        kind = "connection lost"
    return Outcome(started, time.monotonic(), kind)


@dataclass
class CompletionLoad:
    """``editors`` clients, each asking again as soon as it has its answer (2 s after anything else)."""

    settings: Settings
    editors: int = 2
    outcomes: list[Outcome] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, max_seconds: float) -> None:
        give_up = time.monotonic() + max_seconds
        await asyncio.gather(*(self._editor(i, give_up) for i in range(self.editors)))

    async def _editor(self, index: int, give_up: float) -> None:
        nc = await nats.connect(self.settings.effective_nats_url(), max_reconnect_attempts=-1,
                                reconnect_time_wait=0.5, connect_timeout=2)
        try:
            for _ in range(MAX_REQUESTS_PER_EDITOR):
                if self.stop.is_set() or time.monotonic() > give_up:
                    return
                outcome = await ask(nc, self.settings.completion_subject, good_request(index))
                self.outcomes.append(outcome)
                if outcome.kind != "answered":
                    await asyncio.sleep(2.0)
        finally:
            await nc.close()


def counts(outcomes: list[Outcome]) -> Counter[str]:
    return Counter(o.kind for o in outcomes)


@dataclass
class CommitLoad:
    """Commits in ``root`` (hooks installed) in a thread: each one adds a function to one of a few files, or
    deletes the function the previous round added. Counts the events the hook said it could not publish."""

    root: Path
    commits: int = 0
    refused: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    FILES = ("shop/pricing.py", "shop/models.py", "shop/shipping.py", "web/format.ts")

    async def run(self, max_seconds: float) -> None:
        give_up = time.monotonic() + max_seconds
        while self.commits < MAX_COMMITS and not self.stop.is_set() and time.monotonic() < give_up:
            await asyncio.to_thread(self._commit, self.commits)
            self.commits += 1
            await asyncio.sleep(COMMIT_EVERY_S)

    def _commit(self, n: int) -> None:
        path = self.root / self.FILES[n % len(self.FILES)]
        if path.suffix == ".ts":
            path.write_text(path.read_text() + f"\nexport function faultsHelper{n}(x: number): number {{\n"
                            f"  return x + {n};\n}}\n")
        else:
            path.write_text(path.read_text() + f"\n\ndef faults_helper_{n}(value):\n    return value + {n}\n")
        git(self.root, "add", "-A")
        out = _commit_output(self.root, f"faults {n}")
        if "index not updated" in out:
            self.refused += 1


def _commit_output(root: Path, message: str) -> str:
    proc = subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", message], capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}, check=True)
    return proc.stdout + proc.stderr


ROWS: list[dict[str, object]] = []  # one per part killed, for the terminal summary
