"""Issue 31, item 6: what another local user could read or take over. KV files were 0644 in a 0755 folder
(the model's state after reading someone's file); a pre-created /tmp/ctxpress-<uid>-* directory was accepted as
Triton's workspace (its sockets, and the model store Triton runs); secrets were written through a guessable
temporary name without O_EXCL, so a planted symlink or file received them."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ctxpress_core.identity import NatsCredentials, write_credentials
from db.embedded import EmbeddedPostgres
from serving.engine.kv_disk import KVDiskTier
from serving.engine.triton_workspace import short_workspace_path
from tests.conftest import Appliance

SOMEONE_ELSE = 65534  # nobody


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_kv_files_and_their_folder_are_owner_only(tmp_path: Path) -> None:
    folder = tmp_path / "kv"
    folder.mkdir(mode=0o755)  # as an earlier version left it
    folder.chmod(0o755)
    tier = KVDiskTier(folder, 1 << 20, "model")
    tier.save("alice:file.py", [1, 2, 3], b"kv" * 100)
    (kv_file,) = folder.iterdir()
    assert _mode(folder) == 0o700, oct(_mode(folder))  # before: 0o755
    assert _mode(kv_file) == 0o600, oct(_mode(kv_file))  # before: 0o644 (umask)


def _long_triton_dir(tmp_path: Path) -> tuple[Path, Path]:
    """A state directory deep enough that the workspace goes to /tmp, and the name it gets there."""
    triton_dir = tmp_path / ("d" * 60) / ("e" * 60) / "triton"
    triton_dir.mkdir(parents=True)
    digest = hashlib.sha256(str(triton_dir.resolve()).encode()).hexdigest()[:12]
    return triton_dir, Path(tempfile.gettempdir()) / f"ctxpress-{os.getuid()}-{digest}"


@pytest.mark.parametrize("planted", ["open to all", "someone else's", "a symlink to someone else's"])
def test_a_planted_tmp_directory_is_not_triton_s_workspace(tmp_path: Path, planted: str) -> None:
    triton_dir, predictable = _long_triton_dir(tmp_path)
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    workspace: Path | None = None
    try:
        if planted == "a symlink to someone else's":
            predictable.symlink_to(elsewhere)
            os.lchown(predictable, SOMEONE_ELSE, SOMEONE_ELSE)
        else:
            predictable.mkdir()
            predictable.chmod(0o777)
            if planted == "someone else's":
                os.chown(predictable, SOMEONE_ELSE, SOMEONE_ELSE)
        workspace = short_workspace_path(triton_dir)
        # before the fix: predictable/workspace (or, through the link, elsewhere/workspace)
        assert workspace.parent != predictable and not workspace.resolve().is_relative_to(elsewhere)
        info = workspace.parent.lstat()
        assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700 and stat.S_ISDIR(info.st_mode)
    finally:
        if workspace is not None and workspace.parent != predictable and workspace.parent.is_dir():
            os.rmdir(workspace.parent)  # the fresh one made instead (pytriton would make the workspace in it)
        if predictable.is_symlink() or predictable.is_file():
            predictable.unlink()
        elif predictable.exists():
            os.rmdir(predictable)


def test_an_unplanted_tmp_directory_is_made_private_and_reused(tmp_path: Path) -> None:
    triton_dir, predictable = _long_triton_dir(tmp_path)
    try:
        assert short_workspace_path(triton_dir) == predictable / "workspace"
        assert _mode(predictable) == 0o700
        assert short_workspace_path(triton_dir) == predictable / "workspace"  # ours: the next start keeps it
    finally:
        os.rmdir(predictable)


def _plant(tmp_name: Path, victim: Path) -> None:
    """What someone who may write in the folder prepares: the guessable name, as a link to a file they read."""
    victim.write_text("")
    victim.chmod(0o666)
    tmp_name.symlink_to(victim)


def test_credentials_are_not_written_through_a_planted_name(tmp_path: Path) -> None:
    out = tmp_path / "alice.json"
    victim = tmp_path / "readable-by-the-attacker"
    _plant(tmp_path / f".{out.name}.{os.getpid()}.tmp", victim)
    write_credentials(out, NatsCredentials("tls://appliance:4222", "alice", "s3cret-pass"))
    assert "s3cret-pass" not in victim.read_text()  # before: the whole credentials file
    assert not out.is_symlink() and _mode(out) == 0o600 and "s3cret-pass" in out.read_text()


def test_the_database_password_is_not_written_through_a_planted_name(tmp_path: Path) -> None:
    root = tmp_path / "postgres"  # owned by the server's system user in a real set-up: it may plant names there
    root.mkdir()
    victim = tmp_path / "readable-by-postgres"
    _plant(root / f".password.{os.getpid()}.tmp", victim)
    password = EmbeddedPostgres(root, "127.0.0.1", 1).password()
    assert password and password not in victim.read_text()
    assert _mode(root / "password") == 0o600 and not (root / "password").is_symlink()


async def test_the_engine_status_is_owner_only(appliance: Appliance, nats_client: Any) -> None:
    """The engine's status names every file in its KV pool (user:repository:path in team mode)."""
    status = appliance.settings.run_dir / "engine-status.json"
    request = {"repository": "exposure", "path": "status.py", "text": "def f():\n    return ", "line": 1,
               "column": 11, "max_tokens": 2}
    reply = json.loads((await nats_client.request(appliance.settings.completion_subject,
                                                  json.dumps(request).encode(), timeout=120)).data)
    assert "error" not in reply, reply
    assert stat.S_IMODE(status.stat().st_mode) == 0o600
