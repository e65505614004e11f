"""BUILD.json: what was built, from what, with which flags, and the hashes to prove it."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from build_engines.plan import Layout

MANIFEST_VERSION = 1
_CHUNK = 8 * 1024 * 1024


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def hash_tree(root: Path, patterns: tuple[str, ...], progress: Callable[[str], None] | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for pattern in patterns:
        for p in sorted(root.glob(pattern)):
            if p.is_file():
                if progress:
                    progress(f"hashing {p}")
                out[str(p.relative_to(root))] = sha256_file(p)
    return out


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def write_manifest(out: Path, progress: Callable[[str], None] | None = None) -> dict[str, object]:
    layout = Layout(out)
    plan = json.loads(layout.plan_json.read_text())
    calib_file = layout.calib_dir / "calibration.json"
    calibration = json.loads(calib_file.read_text()) if calib_file.exists() else None
    opts = plan["options"]
    roles = ["target"] + (["draft"] if opts.get("draft") else [])
    engines: dict[str, object] = {}
    for role in roles:
        engine_dir = layout.engine(role)
        config_path = engine_dir / "config.json"
        engines[role] = {
            "path": str(engine_dir.relative_to(out)),
            "hf_checkpoint": opts[role],
            # Hash the source checkpoint too: an engine is only reproducible from the same weights.
            "hf_checkpoint_sha256": hash_tree(Path(opts[role]), ("*.safetensors", "config.json"), progress),
            "engine_sha256": hash_tree(engine_dir, ("*.engine", "config.json"), progress),
            "engine_build_config": (
                json.loads(config_path.read_text()).get("build_config") if config_path.exists() else None
            ),
        }
    manifest: dict[str, object] = {
        "manifest_version": MANIFEST_VERSION,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "versions": {
            "tensorrt_llm_pinned": plan["tensorrt_llm_pinned"],
            "tensorrt_llm_installed": _version("tensorrt-llm") or _version("tensorrt_llm"),
            "tensorrt": _version("tensorrt"),
            "nvidia_modelopt": _version("nvidia-modelopt"),
            "python": platform.python_version(),
        },
        "gpu": opts["gpu"],
        "resolved": plan["resolved"],
        "options": opts,
        "steps": plan["steps"],
        "calibration": calibration,
        "engines": engines,
        "tokenizer": str(layout.tokenizer.relative_to(out)),
    }
    layout.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(out: Path) -> dict[str, object]:
    path = Layout(out).manifest
    if not path.exists():
        raise SystemExit(f"{path} not found: run `ctxpress build-engines` first (triton-repo reads its manifest)")
    data: dict[str, object] = json.loads(path.read_text())
    return data
