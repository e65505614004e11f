"""Where pytriton's workspace goes: a path short enough for its sockets, never a directory another user made."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("ctxpress.triton")

# pytriton puts ZeroMQ ipc sockets in its workspace; a Unix socket path may not exceed
# 107 bytes, and "<workspace>/<model>_0_0-server.sock" must fit for every model we serve.
_SOCKET_NAME_ROOM = len("/embedder_0_0-server.sock") + 8
_SOCKET_PATH_MAX = 107


def short_workspace_path(triton_dir: Path) -> Path:
    """Where pytriton's workspace goes: under the state directory when the sockets fit.

    Otherwise a private directory in /tmp. A symbolic link would not do: pytriton resolves the
    workspace path, so the sockets would land at the long path again. The workspace holds only
    sockets and a generated model store, rebuilt on every start, so it need not be persistent.
    """
    triton_dir.mkdir(parents=True, exist_ok=True)
    workspace = (triton_dir / "workspace").resolve()
    if len(str(workspace)) + _SOCKET_NAME_ROOM > _SOCKET_PATH_MAX:
        digest = hashlib.sha256(str(triton_dir.resolve()).encode()).hexdigest()[:12]
        workspace = _private_tmp_dir(Path(tempfile.gettempdir()) / f"ctxpress-{os.getuid()}-{digest}") / "workspace"
    # pytriton insists on creating the workspace itself; a crash may have left one behind.
    shutil.rmtree(workspace, ignore_errors=True)
    return workspace


def _private_tmp_dir(path: Path) -> Path:
    """``path`` when it is a directory of ours that nobody else may enter, else a new one (``mkdtemp``).

    The name is predictable and /tmp is everyone's: another local user could create it first, open to all, and
    then reach pytriton's sockets or replace the model store it writes there (Python that Triton runs as us).
    A directory not owned by us, open to others, or a symlink is never used; we make a fresh one instead, so
    that such a user can neither get in nor stop the appliance from starting."""
    try:
        if path.is_symlink() and path.lstat().st_uid == os.getuid():  # left by an earlier version that used a link
            path.unlink()
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        log.warning("cannot create %s (%s): using a new private directory", path, exc)
        return Path(tempfile.mkdtemp(prefix=f"ctxpress-{os.getuid()}-"))
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
        return path
    log.warning("%s is not a private directory of ours (owner %d, mode %o%s): using a new one", path, info.st_uid,
                stat.S_IMODE(info.st_mode), ", a symlink" if stat.S_ISLNK(info.st_mode) else "")
    return Path(tempfile.mkdtemp(prefix=f"ctxpress-{os.getuid()}-"))
