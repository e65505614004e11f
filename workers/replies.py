"""Where a service may answer: the reply-subject rule (``ctxpress_core.identity.reply_refused``) applied to a
received message, with the log line and the count of every message dropped by it. Used by every responder: the
completion worker, the gateway and the index worker's status."""

from __future__ import annotations

import json
import logging

from nats.aio.msg import Msg

from ctxpress_core.identity import reply_refused
from workers import metrics

log = logging.getLogger("ctxpress.replies")

_SHOWN_CHARS = 200  # of a client-chosen reply subject, in the log


def answerable(msg: Msg, *, team: bool, service: str) -> bool:
    """True when ``msg`` may be served (and answered at its reply subject, when it has one); otherwise it is
    dropped unanswered, logged and counted (``ctxpress_replies_refused``)."""
    why = reply_refused(msg.subject, msg.reply, team=team)
    if why is None:
        return True
    metrics.REPLIES_REFUSED.labels(service).inc()
    log.warning(json.dumps({"event": "reply refused", "service": service, "subject": msg.subject[:_SHOWN_CHARS],
                            "reply": (msg.reply or "")[:_SHOWN_CHARS], "why": why}))
    return False
