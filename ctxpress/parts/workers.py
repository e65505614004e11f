"""The workers' parts: the completion worker and the index worker, each ready once it answers a
request-reply round trip on NATS."""

from __future__ import annotations

import sys
from typing import Any

from ctxpress.parts.base import Part, PartStatus
from ctxpress.parts.probes import nats_answers, nats_reply
from ctxpress_core.settings import Settings
from indexer.stream import dead_letter_stream


class CompletionWorkerPart(Part):
    name = "completion-worker"
    hang_checked = True

    def address(self) -> str:
        return f"{self.settings.completion_subject} (queue {self.settings.completion_queue})"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "workers.completion"]

    def ready(self) -> bool:
        # Ready means it answers: an empty object must come back as a structured error.
        return nats_answers(self.settings, self.settings.completion_subject, b"{}", "error")

    def answers(self) -> bool:
        # The same round trip through the worker's event loop, on the feedback subject: a `{}` completion
        # request costs an error metric, a log line and a telemetry row, once a second from the supervisor;
        # invalid feedback is answered without any of them.
        return nats_answers(self.settings, self.settings.feedback_subject, b"{}", "error")


class IndexWorkerPart(Part):
    name = "index-worker"
    hang_checked = True

    def address(self) -> str:
        return f"stream {self.settings.index_stream} (consumer {self.settings.index_consumer})"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "workers.index_worker"]

    def ready(self) -> bool:
        # Ready once it has bound the durable consumer and answers its status subject (one round trip).
        return nats_answers(self.settings, self.settings.index_status_subject, b"", "worker")

    def status(self) -> PartStatus:
        status = super().status()
        if status.running:
            status.detail = index_summary(nats_reply(self.settings, self.settings.index_status_subject, b"", 3.0),
                                          self.settings)
        return status


def index_summary(reply: dict[str, Any] | None, settings: Settings) -> str:
    """The index worker's line in ``ctxpress status``: an alert first when events were given up on."""
    if reply is None:
        return "no status answer from the index worker"
    line = f"{reply.get('events', 0)} events, {reply.get('files_indexed', 0)} files indexed"
    full = reply.get("users_at_quota")
    if full:  # their next events are refused (JetStream's error ack) until the worker catches up
        line = (f"ALERT: index events refused for {', '.join(sorted(full))}: at the quota of "
                f"{settings.index_user_max_events} pending (CTXPRESS_INDEX_USER_MAX_EVENTS); {line}")
    dead = reply.get("dead_letters")
    if dead:
        line = (f"ALERT: {dead} index event(s) given up on, kept in the stream {dead_letter_stream(settings)} "
                f"(see the index worker's log for why); {line}")
    return line
