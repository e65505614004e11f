import hashlib
from pathlib import Path

import pytest

from serving.weights import TARGET, ModelChecksumMismatch, PackagedModel, ensure_model


class LocalParts(PackagedModel):
    def __init__(self, parts: list[Path], sha256: str, size: int) -> None:
        super().__init__("tiny", "tiny.gguf", "none", len(parts), size, sha256)
        object.__setattr__(self, "_parts", parts)

    def part_paths(self) -> list[Path]:
        return self._parts  # type: ignore[attr-defined]


def make_parts(tmp_path: Path) -> tuple[list[Path], bytes]:
    chunks = [b"GGUF" + bytes(range(256)) * 10, b"second part", b"third"]
    paths = []
    for i, chunk in enumerate(chunks):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(chunk)
        paths.append(p)
    return paths, b"".join(chunks)


def test_joins_parts_in_order_and_verifies(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path)
    model = LocalParts(parts, hashlib.sha256(whole).hexdigest(), len(whole))
    out = ensure_model(model, tmp_path / "models")
    assert out.read_bytes() == whole
    # second call reuses the verified file
    assert ensure_model(model, tmp_path / "models") == out


def test_wrong_checksum_leaves_nothing(tmp_path: Path) -> None:
    parts, whole = make_parts(tmp_path)
    model = LocalParts(parts, "0" * 64, len(whole))
    with pytest.raises(ModelChecksumMismatch):
        ensure_model(model, tmp_path / "models")
    assert not list((tmp_path / "models").iterdir())


def test_packaged_target_is_installed_with_all_parts() -> None:
    paths = TARGET.part_paths()
    assert len(paths) == 22
    assert sum(p.stat().st_size for p in paths) == TARGET.size
