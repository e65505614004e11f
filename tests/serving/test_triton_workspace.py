"""pytriton's workspace must leave room for its ZeroMQ socket paths (107 bytes at most)."""

from __future__ import annotations

from pathlib import Path

from serving.engine.triton_workspace import short_workspace_path

SOCKET = "embedder_0_0-server.sock"


def test_short_state_dir_keeps_workspace_inside(tmp_path: Path) -> None:
    triton_dir = Path("/tmp") / f"cx{tmp_path.name[-6:]}"
    try:
        workspace = short_workspace_path(triton_dir)
        assert workspace == (triton_dir / "workspace").resolve()
    finally:
        triton_dir.rmdir()


def test_long_state_dir_moves_workspace_to_a_real_short_directory(tmp_path: Path) -> None:
    triton_dir = tmp_path / ("deep-" * 12) / "home" / "triton"
    workspace = short_workspace_path(triton_dir)
    socket = workspace.resolve() / SOCKET  # pytriton resolves the path it is given
    assert len(str(socket)) <= 107
    assert not workspace.parent.is_symlink()
    assert short_workspace_path(triton_dir) == workspace  # stable across restarts
