"""The prompt of a prepared context: its fill-in-the-middle layout (where the middle opens), the key of
the engine's KV pool it goes to and its speculation mode."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from context.prepare import Prepared
from ctxpress_core.wire.v1 import CompletionRequest
from serving.fim import fim_markers, fim_prompt


@dataclass(frozen=True)
class Layout:
    text: str
    markers: tuple[int, ...]  # where the template's special tokens are (serving.fim.fim_markers)


def fim_layout(prepared: Prepared) -> Layout:
    """The prompt sent for a prepared context: prefix-suffix-middle (serving.fim.fim_prompt)."""
    return Layout(fim_prompt(prepared.prefix, prepared.suffix), fim_markers(prepared.prefix, prepared.suffix))


def cache_key(model_name: str, request: CompletionRequest, features: dict[str, bool],
              owner: str | None = None) -> str | None:
    """The engine's KV pool is keyed by repository + path + model (None: the shared context). In team mode
    by user too, shared context included: the cached-token count every reply carries would otherwise tell
    one user whether a prompt they guess matches what another one sent."""
    user = f"{owner}:" if owner is not None else ""
    if request.mode != "optimized" or not features.get("prefix_cache", False):
        return f"{model_name}:{user}shared" if user else None
    return f"{model_name}:{user}{request.repository}:{request.path}"


def cache_salt(owner: str | None, secret: bytes | None = None) -> str:
    """The KV cache salt of a user's requests (inference.CTX_CACHE_SALT): one value per user, one for the
    single-user appliance. An engine that reuses KV blocks across requests by prefix (TensorRT-LLM) reuses and
    reports only what the same salt sent. A keyed hash (HMAC-SHA-256 with the appliance's ``secret``), so the
    engine is never told who it serves; without a secret, a plain SHA-256 of the name."""
    who = b"single-user" if owner is None else b"user:" + owner.encode("utf-8")
    digest = (hmac.new(secret, who, hashlib.sha256) if secret
              else hashlib.sha256(b"ctxpress-cache-salt\x00" + who))
    return digest.hexdigest()[:32]


def speculation(request: CompletionRequest, features: dict[str, bool]) -> str:
    if request.mode != "optimized" or not features.get("speculative", False):
        return "none"
    return "auto"
