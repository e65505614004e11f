"""Wire format v1: the messages IDEs and workers exchange over NATS.

Subjects: ``ctxpress.v1.complete`` (request-reply). Every reply is either a
``CompletionResponse`` or an ``ErrorResponse``; a client tells them apart by the
top-level ``error`` key.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ctxpress_core import features
from ctxpress_core.errors import SERVER_SIDE_MESSAGES, CtxpressError, ErrorCode, UnsupportedLanguage
from ctxpress_core.languages import KNOWN_LANGUAGES, normalize_language

SUBJECT_COMPLETE = "ctxpress.v1.complete"
SUBJECT_FEEDBACK = "ctxpress.v1.feedback"

MAX_TOKENS_LIMIT = 512
MAX_DECODE_MS = 600_000  # the longest a request may let the engine write (max_decode_ms)
# The largest line, column or count a message may carry: PostgreSQL's ``integer`` (chars_kept is stored) and a C
# int (tree-sitter's rows). No file comes near it; a larger number is the sender's error, answered as one.
MAX_WIRE_INT = 2**31 - 1


_Line = Annotated[int, Field(ge=0, le=MAX_WIRE_INT)]


def wire_lines(text: str) -> list[str]:
    """The lines ``line`` counts, without their ``\n`` or ``\r\n``: split at ``\n`` only, as
    tree-sitter counts rows and editors send them (a form feed or U+2028 does not end a line)."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines[-1] == "":  # the text ends with a line end (or is empty)
        lines.pop()
    return lines


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ErrorBody(BaseModel):
    code: ErrorCode
    message: str
    details: list[dict[str, object]] | None = None
    # ``rate_limited`` (and any refusal that knows): milliseconds after which asking again may be answered
    retry_after_ms: int | None = None

    _detail: str | None = PrivateAttr(default=None)  # what failed, for the log: never on the wire

    @classmethod
    def of(cls, error: CtxpressError) -> ErrorBody:
        """The reply to a request that failed with ``error``: its class says the code. A failure on the appliance's
        side gets its code's fixed message (``SERVER_SIDE_MESSAGES``); its text stays in ``detail``."""
        generic = SERVER_SIDE_MESSAGES.get(error.code)
        body = cls(code=error.code, message=generic or str(error), details=None if generic else error.details,
                   retry_after_ms=getattr(error, "retry_after_ms", None))
        body._detail = str(error)
        return body

    @property
    def detail(self) -> str:
        """What the worker's log says of this error: the failure's own text where the reply has a fixed one."""
        return self._detail or self.message


class ErrorResponse(BaseModel):
    error: ErrorBody


def _refuse_unstorable(value: object, *, nul: bool = True) -> object:
    """``value`` unchanged, or a ``ValueError`` when a string in it cannot be stored or encoded.

    Why at the wire: PostgreSQL refuses NUL in text, and a lone surrogate (``"\\ud800"`` is valid JSON) has no
    UTF-8 form. Accepted, either one failed later, far from its sender: a telemetry batch holding it could never
    be written (and held every other row back), a tokenizer or driver raised ``internal``. Refused here, the
    sender is told which field is wrong (``invalid_request``)."""
    if isinstance(value, str):
        if nul and "\x00" in value:
            raise ValueError("contains a NUL character (U+0000), which cannot be stored")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"contains a lone surrogate (U+{ord(value[exc.start]):04X}), which is not valid "
                             "Unicode text") from None
    elif isinstance(value, list | tuple):
        for item in value:
            _refuse_unstorable(item, nul=nul)
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_unstorable(key, nul=nul)
            _refuse_unstorable(item, nul=nul)
    return value


class Inbound(BaseModel):
    """A message a client sends: every string in it must be storable (no NUL, no lone surrogate).

    A subclass lists in ``_NUL_ALLOWED`` the fields that are never stored (a file's text on its way to the
    engine), where NUL is kept and only text without a UTF-8 form is refused."""

    _NUL_ALLOWED: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: object, info: ValidationInfo) -> object:
        return _refuse_unstorable(value, nul=info.field_name not in cls._NUL_ALLOWED)


def _known_features(switches: dict[str, bool] | None) -> dict[str, bool] | None:
    """The switches less the retired ones (features.RETIRED: accepted, ignored); any other unknown name is refused."""
    if switches is None:
        return None
    unknown = set(switches) - set(features.REGISTRY) - features.RETIRED
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {sorted(features.REGISTRY)}")
    return {name: on for name, on in switches.items() if name not in features.RETIRED}


# Optimisations switched per request (ctxpress_core.features).
Switches = Annotated[dict[str, bool] | None, AfterValidator(_known_features)]


class CompletionRequest(Inbound):
    """What an IDE sends. Either ``text`` or a ``content_hash`` the server already knows."""

    model_config = ConfigDict(extra="forbid", strict=True)
    # The file's text goes to the engine, never to the database: a file with a NUL in it is still completed.
    _NUL_ALLOWED: ClassVar[frozenset[str]] = frozenset({"text"})

    repository: str = Field(min_length=1, max_length=256, description="repository id")
    path: str = Field(min_length=1, max_length=4096, description="file path relative to the repository")
    text: str | None = None
    content_hash: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    line: int = Field(ge=0, le=MAX_WIRE_INT,
                      description="0-based line of the cursor (lines end at '\\n', see wire_lines)")
    column: int = Field(ge=0, le=MAX_WIRE_INT, description="0-based column of the cursor, in characters")
    language: str | None = None
    max_tokens: int = Field(default=64, ge=1, le=MAX_TOKENS_LIMIT)
    mode: Literal["optimized", "baseline"] = "optimized"
    budget_tokens: int | None = Field(default=None, ge=64, le=16384)
    # Line ranges (0-based, inclusive) the developer edited recently, most recent first.
    # (not strict: JSON has no tuples, a range arrives as a two-number array)
    recent_edits: list[Annotated[tuple[_Line, _Line], Strict(False)]] | None = Field(
        default=None, max_length=64)
    # The caller's id: ``ctxpress.v1.cancel`` names it to abandon the request.
    request_id: str | None = Field(default=None, max_length=128)
    # How long the caller waits for the answer; past it the request is abandoned (default: the
    # worker's inference timeout).
    timeout_ms: int | None = Field(default=None, ge=100, le=600_000)
    # How long the engine may write, from its first token: past it, the completion ends at the next line end
    # (llama.cpp's t_max_predict_ms; a multi-line suggestion is cut to its lines written by then). None: no limit.
    max_decode_ms: int | None = Field(default=None, ge=1, le=MAX_DECODE_MS)
    # Labels for telemetry and ablations: which workload sent this, which optimisations to use.
    scenario: str | None = Field(default=None, max_length=64)
    features: Switches = None

    @field_validator("language", mode="before")
    @classmethod
    def _our_language_name(cls, value: object) -> object:
        """An editor's name for a language (``typescriptreact``, ``c++``, ``js``) is ours from here on."""
        return normalize_language(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _text_or_hash(self) -> CompletionRequest:
        if (self.text is None) == (self.content_hash is None):
            raise ValueError("give exactly one of 'text' or 'content_hash'")
        if self.language is not None and self.language not in KNOWN_LANGUAGES:
            raise UnsupportedLanguage(self.language, sorted(KNOWN_LANGUAGES))
        return self


class Timings(BaseModel):
    context_ms: float = 0.0
    queue_ms: float = 0.0
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0


class BlockReport(BaseModel):
    """One piece of the assembled context, and why it is there (or was dropped)."""

    kind: str
    name: str
    start_line: int  # 0-based, inclusive
    end_line: int
    form: str  # "whole" | "summary" | "partial"
    tokens: int
    reason: str


class PlanReport(BaseModel):
    """Why a request's prompt was smaller than its budget (workers/completion/prompt_plan.py): the full prompt's
    uncached part and expected decode did not fit the latency target at the engine's measured speed. The full
    prompt is filled in behind the answer, so the next request there gets it."""

    budget_tokens: int  # the planned budget
    full_budget_tokens: int
    target_ms: int  # the latency target, or the request's time left if sooner
    full_expected_ms: int  # what the full prompt would have taken, as planned
    cached_tokens: int  # of the full prompt, held by the engine already
    reason: str
    prompt_ms_per_token: float  # the engine's measured costs the plan was made with
    decode_ms_per_token: float
    completion_tokens: float


class ContextReport(BaseModel):
    # "window" (baseline); optimized: "whole-file" (the file fits the budget), "ast" (cropped) or
    # "window-fallback" (degraded)
    strategy: str
    sources: list[str]
    file_tokens: int
    context_tokens: int  # tokens of prefix + suffix sent to the model
    prompt_tokens: int | None = None  # as counted by the engine, FIM markers included
    cached_tokens: int | None = None
    # of cached_tokens, those the engine read back from its disk tier (a file evicted from memory
    # or kept over a restart), and the milliseconds that took
    restored_tokens: int | None = None
    restore_ms: float | None = None
    kv_bytes: int | None = None  # KV memory of the request's sequence in the engine, when it reports it
    window_start_line: int | None = None
    window_end_line: int | None = None
    truncated: bool = False
    degraded: str | None = None  # why an optional part fell back to the baseline path
    budget_tokens: int | None = None
    blocks: list[BlockReport] = Field(default_factory=list)
    dropped: list[BlockReport] = Field(default_factory=list)
    retrieval: dict[str, object] | None = None  # cross-file retrieval: timing, threshold, or why skipped
    plan: PlanReport | None = None  # the prompt was planned smaller than its budget (None: the full budget)


class CompletionResponse(BaseModel):
    id: str
    completion: str
    finish_reason: str
    model: str
    mode: str
    language: str
    content_hash: str
    timings: Timings
    context: ContextReport
    shard: int | None = None  # behind the gateway: the shard that answered (its engine holds the file's cache)
    completion_tokens: int | None = None
    draft_tokens_proposed: int | None = None
    draft_tokens_accepted: int | None = None
    features: dict[str, bool] = Field(default_factory=dict)


class Feedback(Inbound):
    """What the IDE did with a completion, so the real acceptance rate can be computed."""

    model_config = ConfigDict(extra="forbid", strict=True)

    completion_id: str = Field(min_length=1, max_length=128)
    action: Literal["shown", "accepted", "dismissed"]
    chars_kept: int | None = Field(default=None, ge=0, le=MAX_WIRE_INT)


SUBJECT_FILE_OPENED = "ctxpress.v1.file_opened"
SUBJECT_CANCEL = "ctxpress.v1.cancel"
# Set by the gateway on a request it forwards to a shard for a user it refused for their share in the last
# ``workers.fair_share.FLOODING_WINDOW_S``: the worker sends that user's requests to the engine at a reduced weight.
# Read on shard subjects only (only the gateway may publish there).
HEADER_FLOODING = "Ctxpress-Flooding"


class CancelRequest(Inbound):
    """Abandon a ``complete`` request the caller no longer waits for (published, no reply): the
    worker stops assembling it and the engine drops it from its queue or stops it at its next step."""

    model_config = ConfigDict(extra="forbid", strict=True)

    request_id: str = Field(min_length=1, max_length=128)


class FileOpened(Inbound):
    """An IDE opened a file: parse it now, so the first keystroke finds a warm tree."""

    model_config = ConfigDict(extra="forbid", strict=True)
    _NUL_ALLOWED: ClassVar[frozenset[str]] = frozenset({"text"})  # as CompletionRequest.text

    repository: str = Field(min_length=1, max_length=256)
    path: str = Field(min_length=1, max_length=4096)
    text: str
    language: str | None = None
    # Where the cursor is, when the IDE knows: the stable part of the prompt for that position is
    # processed ahead of the first keystroke. 0-based, like CompletionRequest.
    line: int | None = Field(default=None, ge=0, le=MAX_WIRE_INT)
    column: int = Field(default=0, ge=0, le=MAX_WIRE_INT)
    # The switches the IDE's completion requests carry (CompletionRequest.features): the pre-warmed prompt is
    # the one they will ask for.
    features: Switches = None


# --- Repository index events (JetStream stream ``CTXPRESS_INDEX``) ---------------------------------
# Git hooks publish ``IndexEvent`` on ``ctxpress.v1.index.git``; IDEs publish ``FileSaved`` on
# ``ctxpress.v1.file_saved``. Both carry the file contents, so an index worker needs no access to the
# repository's disk (a team server indexes laptops' commits).

SUBJECT_FILE_SAVED = "ctxpress.v1.file_saved"
SUBJECT_INDEX_GIT = "ctxpress.v1.index.git"
# Index events the index worker gave up on, with the headers below; only the index worker publishes here.
SUBJECT_INDEX_DEAD = "ctxpress.v1.index.dead"
HEADER_DEAD_SUBJECT = "Ctxpress-Subject"  # the subject the event was published on (whose user it names)
HEADER_DEAD_ERROR = "Ctxpress-Error"  # why it was given up: the last failure
HEADER_DEAD_DELIVERIES = "Ctxpress-Deliveries"


# The longest path an index event may name, in UTF-8 bytes. PostgreSQL refuses an index entry over about 2.7 KB and
# a path is part of several (with the owner, a symbol and a content hash): a longer one, taken here, was refused by
# the database and kept as a dead letter, an alert anyone could raise. Real paths stay far below it.
MAX_INDEX_PATH_BYTES = 1024


def _fits_the_index(path: str) -> str:
    if len(path.encode("utf-8", "surrogatepass")) > MAX_INDEX_PATH_BYTES:
        raise ValueError(f"a path longer than {MAX_INDEX_PATH_BYTES} bytes (UTF-8) cannot be indexed")
    return path


IndexPath = Annotated[str, Field(min_length=1, max_length=MAX_INDEX_PATH_BYTES), AfterValidator(_fits_the_index)]


class FileSaved(Inbound):
    """An IDE saved a file: index this text now (no commit needed)."""

    model_config = ConfigDict(extra="forbid")

    repository: str = Field(min_length=1, max_length=256)
    path: IndexPath = Field(description="relative to the repository root, '/'-separated")
    text: str
    saved_at: float | None = Field(default=None, description="epoch seconds, for freshness measurement")


class ChangedPath(Inbound):
    model_config = ConfigDict(extra="forbid")
    # A NUL in a file's content makes it binary (below), rather than the whole commit's event invalid.
    _NUL_ALLOWED: ClassVar[frozenset[str]] = frozenset({"text"})

    path: IndexPath
    status: Literal["A", "M", "D", "R"]
    old_path: IndexPath | None = None  # for "R": the path the file had before
    text: str | None = None  # the content at ``commit``; None for "D" and for skipped files
    skipped: str | None = None  # why the publisher sent no content ("secret", "binary", "too large")

    @model_validator(mode="after")
    def _nul_is_binary(self) -> ChangedPath:
        """What ``indexer.filters.content_reason`` says of such a file (a hook of an earlier version sent it):
        binary, indexed by name only. PostgreSQL could not store it."""
        if self.text is not None and "\x00" in self.text:
            self.text, self.skipped = None, "binary"
        return self


class IndexEvent(Inbound):
    """What a git hook publishes: the paths a commit (merge, checkout, rewrite) changed, with contents."""

    model_config = ConfigDict(extra="forbid")

    repository: str = Field(min_length=1, max_length=256)
    commit: str = Field(pattern=r"^[0-9a-f]{40,64}$")
    previous: str | None = None
    hook: str
    changes: list[ChangedPath]
    published_at: float | None = None  # epoch seconds when the hook started
    part: int = Field(default=0, ge=0)  # a large change is split over several messages
    parts: int = Field(default=1, ge=1)
