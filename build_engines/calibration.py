"""Build the calibration set from the repository being served.

quantize.py accepts a local dataset directory: ``load_dataset(dir, split="train")`` and
the ``text`` column (tensorrt_llm/quantization/quantize_by_modelopt.py,
``get_calib_dataloader``). We write ``train.jsonl`` with one ``{"text": ...}`` per sample.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

CODE_SUFFIXES = frozenset({
    ".py", ".ts", ".tsx", ".js", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc",
    ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".scala", ".sh", ".sql",
})
MAX_FILE_BYTES = 512 * 1024  # generated/vendored blobs would skew the ranges


@dataclass(frozen=True)
class CalibrationSet:
    path: str
    sha256: str
    samples: int
    files: int
    source_repo: str
    source_commit: str | None


def _list_files(repo: Path) -> list[Path]:
    """Tracked files when it is a git checkout (skips build output), else a walk."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True, timeout=60
        ).stdout.decode()
        files = [repo / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = [p for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts]
    return sorted(p for p in files if p.suffix in CODE_SUFFIXES and p.is_file())


def _commit(repo: Path) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, check=True, timeout=30, text=True
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _chunks(text: str, max_chars: int) -> list[str]:
    """Cut at line boundaries so samples look like the prompts the model will see."""
    out: list[str] = []
    buf: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        if size + len(line) > max_chars and buf:
            out.append("".join(buf))
            buf, size = [], 0
        buf.append(line[:max_chars])
        size += len(buf[-1])
    if buf and "".join(buf).strip():
        out.append("".join(buf))
    return out


def build_calibration_set(repo: Path, out: Path, size: int, max_chars: int) -> CalibrationSet:
    files = _list_files(repo)
    if not files:
        raise SystemExit(f"no source files found under {repo}; calibration needs the served repository's code")
    chunks: list[tuple[str, str]] = []
    for path in files:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for i, chunk in enumerate(_chunks(text, max_chars)):
            # Order by a hash of (path, index): deterministic, yet spread over the whole repo
            # instead of the first N files alphabetically.
            key = hashlib.sha256(f"{path.relative_to(repo)}:{i}".encode()).hexdigest()
            chunks.append((key, chunk))
    chunks.sort()
    picked: list[str] = []
    seen: set[str] = set()
    for _, chunk in chunks:
        # Identical chunks (licence headers, boilerplate) would weigh one pattern twice.
        if chunk not in seen:
            seen.add(chunk)
            picked.append(chunk)
        if len(picked) == size:
            break
    if not picked:
        raise SystemExit(f"no readable source text under {repo}")
    out.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps({"text": c}) + "\n" for c in picked).encode()
    (out / "train.jsonl").write_bytes(data)
    summary = CalibrationSet(
        path=str(out / "train.jsonl"),
        sha256=hashlib.sha256(data).hexdigest(),
        samples=len(picked),
        files=len(files),
        source_repo=str(repo.resolve()),
        source_commit=_commit(repo),
    )
    (out / "calibration.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary
