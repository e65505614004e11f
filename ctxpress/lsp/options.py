"""``ctxpress lsp``'s options: the editor's settings (``initializationOptions``), over the ``CTXPRESS_*``
environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import MAX_DECODE_MS


class LspOptions(BaseModel):
    """``initializationOptions`` (the editor's settings), over the ``CTXPRESS_*`` environment."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    # None: the credentials file's URL in team mode, else CTXPRESS_NATS_URL or the embedded NATS
    nats_url: str | None = Field(default=None, alias="natsUrl")
    credentials: Path | None = None
    repository: str | None = Field(default=None, min_length=1, max_length=256)
    debounce_ms: int = Field(default=0, ge=0, le=5000, alias="debounceMs")
    max_tokens: int = Field(default=Settings.model_fields["default_max_tokens"].default, ge=1, le=512,
                            alias="maxTokens")
    mode: str = Field(default="optimized", pattern="^(optimized|baseline)$")
    timeout_ms: int = Field(default=30_000, ge=100, le=600_000, alias="timeoutMs")
    # past this long writing, a suggestion ends at its next line end (llama.vim's t_max_predict_ms); None: no cap
    max_decode_ms: int | None = Field(default=None, ge=1, le=MAX_DECODE_MS, alias="maxDecodeMs")
    # For measurements: the telemetry label of this editor's requests, optimized mode's switches,
    # and whether a superseded request is abandoned in the appliance too (off: only here).
    scenario: str = Field(default="lsp", min_length=1, max_length=64)
    features: dict[str, bool] | None = None
    abandon_upstream: bool = Field(default=True, alias="abandonUpstream")

    @classmethod
    def from_editor(cls, settings: Settings, given: object) -> tuple[LspOptions, str | None]:
        """The options, and what was wrong with the editor's (then the defaults are used)."""
        defaults: dict[str, Any] = {
            "natsUrl": settings.nats_url, "credentials": settings.nats_credentials,
            "debounceMs": settings.lsp_debounce_ms, "maxTokens": settings.default_max_tokens,
            "maxDecodeMs": settings.lsp_max_decode_ms or None,
            "timeoutMs": int(settings.triton_timeout_s * 1000),
        }
        if given is not None and not isinstance(given, dict):
            return cls.model_validate(defaults), "initializationOptions must be an object"
        given = {k: v for k, v in (given or {}).items() if v not in (None, "")}
        try:
            return cls.model_validate({**defaults, **given}), None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return cls.model_validate(defaults), f"ignored initializationOptions ({problems})"
