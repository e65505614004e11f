import hashlib
import multiprocessing
import random
from pathlib import Path
from typing import Any

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


def _join_in_process(parts: list[Path], sha256: str, size: int, models: Path, start: Any) -> None:
    start.wait()
    ensure_model(LocalParts(parts, sha256, size), models)


def test_processes_that_start_at_once_join_the_model_once_and_whole(tmp_path: Path) -> None:
    """The engine and the worker of a test session ask for the model at the same moment: each must get the
    whole, verified file (they used to write one partial file together, and one found it gone)."""
    rng = random.Random(3)
    chunks = [rng.randbytes(24 << 20) for _ in range(3)]
    parts = []
    for i, chunk in enumerate(chunks):
        parts.append(tmp_path / f"part{i:02d}.bin")
        parts[-1].write_bytes(chunk)
    whole = b"".join(chunks)
    sha256 = hashlib.sha256(whole).hexdigest()
    context = multiprocessing.get_context("fork")
    start = context.Barrier(3)
    joiners = [context.Process(target=_join_in_process, args=(parts, sha256, len(whole), tmp_path / "models", start))
               for _ in range(3)]
    for joiner in joiners:
        joiner.start()
    for joiner in joiners:
        joiner.join(120)
    assert [joiner.exitcode for joiner in joiners] == [0, 0, 0]
    assert hashlib.sha256((tmp_path / "models" / "tiny.gguf").read_bytes()).hexdigest() == sha256
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny.gguf", "tiny.sha256"]


def test_the_packaged_model_chosen_by_settings_names_replies_and_leaves_the_draft_to_the_other() -> None:
    from ctxpress_core.settings import PackagedModelChoice, Settings
    from serving.weights import DRAFT, PACKAGED, draft_model_path

    small = Settings(model=PackagedModelChoice.CODER_0_5B)
    assert small.model_name == DRAFT.file_name.removesuffix(".gguf")
    assert PACKAGED[small.model.file_stem] is DRAFT
    assert draft_model_path(small) is None  # the draft would be the model itself
    assert Settings().model_name == TARGET.file_name.removesuffix(".gguf") and PACKAGED[Settings().model.file_stem] \
        is TARGET
    given = Settings(model=PackagedModelChoice.CODER_0_5B, model_path=Path("/models/other.gguf"))
    assert given.model_name == "other"
