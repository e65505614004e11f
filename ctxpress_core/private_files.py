"""Files only their owner may read (passwords, credentials, keys), written so nobody else can get at them.

A fixed or guessable temporary name (``.<name>.<pid>.tmp``) opened without ``O_EXCL`` lets whoever can write in the
folder (the PostgreSQL system user owns ``<home>/postgres``; ``ctxpress users add --out`` may point anywhere) plant
that name first: as a symlink, the secret is written where it points; as their own file, ``O_CREAT`` keeps their
owner and mode, and the secret is renamed into place readable by them. ``tempfile.mkstemp`` creates a new file
(``O_EXCL``, a random name, mode 0600); ``fsync`` before the rename and of the folder after it make sure a crash
leaves the old file or the new one, never an empty one (a lost password locks the embedded database for good).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_private_file(path: Path, data: str | bytes) -> None:
    """``data`` in ``path``, mode 0600: written whole or not at all, and on disk when this returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    fsync_directory(path.parent)


def new_private_file(directory: Path, prefix: str, data: str) -> Path:
    """A new file under a random name in ``directory`` (mode 0600), for a secret another process reads once."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=prefix)
    with os.fdopen(fd, "w") as f:
        f.write(data)
    return Path(name)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the folder's entry, not the file, records it)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # not supported here (not Linux): the rename stays, only its durability is the kernel's
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
