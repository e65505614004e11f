"""One line instead of a traceback when a command needs a part of the appliance that does not answer.

``ctxpress.cli.main`` hands every exception a command raises to ``part_down``: a ``PartUnavailable``, or a driver's
error that means the same (nats-py's ``NoServersError``, SQLAlchemy's ``OperationalError``, the embedder's or the
engine's client failing to reach Triton), itself, what it was raised from or a member of its exception group,
becomes the line
``error: <part> at <address> cannot be reached (<reason>); <how to start it>`` and exit status 3 (as ``ctxpress
status`` exits when a part is not running). Commands therefore catch none of these themselves; one that must tidy up
first adds a note (``exc.add_note``) and raises it again, and the note ends the line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ctxpress_core.errors import EmbeddingError, InferenceUnavailable, PartUnavailable
from ctxpress_core.settings import Settings

EXIT_PART_DOWN = 3


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, what it was raised from (``raise … from``), and the members of exception groups (asyncio's task
    groups), each once. Not what it was raised *during*: an error in the handling of a lost connection is a bug of
    its own, and keeps its traceback."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
        if current.__cause__ is not None:
            stack.append(current.__cause__)


def reason(exc: BaseException) -> str:
    """Why, short: the system's words for a socket's error, else the end of the driver's first line (``… port 5432
    failed: Connection refused``)."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    if isinstance(exc, TimeoutError):
        return "timed out"
    lines = str(exc).strip().splitlines()
    return lines[0].rsplit(": ", 1)[-1].strip() if lines else ""


def _database_address(settings: Settings) -> str:
    """host:port of the database, never its password."""
    from sqlalchemy.engine import make_url

    try:
        url = make_url(settings.effective_database_url())
    except Exception:  # an unreadable CTXPRESS_DATABASE_URL_FILE: the part is still named
        return "the configured URL"
    return f"{url.host or 'localhost'}:{url.port or 5432}"


def part_down(exc: BaseException, settings: Settings) -> PartUnavailable | None:
    """The part ``exc`` says does not answer, or None when it says something else."""
    for cause in _causes(exc):
        if isinstance(cause, PartUnavailable):
            return cause
        if isinstance(cause, EmbeddingError | InferenceUnavailable):
            return PartUnavailable("Triton", settings.effective_triton_url(), reason(cause))
        kind = f"{type(cause).__module__}.{type(cause).__qualname__}"
        # By name: these modules are imported only by the commands that use them, and only those can raise them.
        if kind == "nats.errors.NoServersError":
            return PartUnavailable("NATS", settings.effective_nats_url())
        if kind in ("sqlalchemy.exc.OperationalError", "psycopg.OperationalError"):
            return PartUnavailable("PostgreSQL", _database_address(settings),
                                   reason(getattr(cause, "orig", None) or cause))
    return None


# Where a part is configured rather than started here, `ctxpress up` does not start it: the setting is named instead.
_EXTERNAL_SETTING = {"NATS": ("nats_url", "nats_credentials"), "PostgreSQL": ("database_url", "database_url_file"),
                     "Triton": ("triton_url",)}


def one_line(down: PartUnavailable, settings: Settings, notes: list[str] | None = None) -> str:
    """What the command prints: the part, where it was asked, and how to start it."""
    configured = [name for name in _EXTERNAL_SETTING.get(down.part, ()) if getattr(settings, name, None) is not None]
    if configured:
        how = f"it runs elsewhere (CTXPRESS_{configured[0].upper()}): check that it is up and reachable"
    else:
        how = "start the appliance with `ctxpress up` (`ctxpress status` shows each part)"
    return f"error: {down}; {how}" + "".join(f"; {note}" for note in notes or [])


def explain(exc: BaseException, settings: Settings) -> str | None:
    """``exc`` as one line when it says that a part is down (``exc``'s notes end it), else None."""
    down = part_down(exc, settings)
    return None if down is None else one_line(down, settings, getattr(exc, "__notes__", None))
