"""Run model-written Python with its tests, fenced in: the scorer of the FIM benchmarks.

A completion is code nobody reviewed, so each program runs in a child process that:

- starts ``python -I -B`` (no user site, no environment variables read, no bytecode written) in a fresh
  scratch directory that is deleted afterwards, with a minimal environment (PATH, HOME and TMPDIR only);
- is killed with its whole process group at a wall-clock limit, and has an equal CPU-time limit;
- has address space, file size, process count and core dumps capped by ``setrlimit``;
- runs behind an audit hook installed before the program's first line: it refuses writes, renames and
  removals outside the scratch directory, new processes, sockets and ``ctypes``. The hook is a Python-level
  fence (C code could step around it); the operating-system fences are the limits above and
- no network at all when ``unshare -rn`` works on this host (a user namespace with an empty network
  namespace); where it does not, the reason is given once by :func:`network_isolation` and the audit hook's
  socket refusal is the only fence.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 1024
# Enough for the interpreter and the small files a test may write; big enough files are an attack.
FILE_SIZE_LIMIT = 16 * 1024 * 1024
PROCESS_LIMIT = 64
OUTPUT_KEPT = 2000

# Installed by the child before the program runs. Audit hooks cannot be removed once added, so the
# program cannot switch it off from Python.
_GUARD = r'''
import os, sys

_ROOT = os.path.realpath(os.getcwd())
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_REFUSED = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
            "os.killpg", "subprocess.Popen", "socket.connect", "socket.bind", "socket.sendto", "ctypes.dlopen",
            "ctypes.cdata", "os.chroot", "pty.spawn"}
_PATH_CHANGES = {"os.remove", "os.rmdir", "os.rename", "os.link", "os.symlink", "os.mkdir", "os.chmod",
                 "os.chown", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"}


def _inside(path):
    if isinstance(path, int):
        return True  # an open descriptor: it was checked when it was opened
    try:
        full = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return full == _ROOT or full.startswith(_ROOT + os.sep)


def _guard(event, args):
    if event in _REFUSED:
        raise PermissionError(f"sandbox: {event} refused")
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
        if writes and not _inside(path):
            raise PermissionError(f"sandbox: write outside the scratch directory refused: {path!r}")
    elif event in _PATH_CHANGES:
        for path in args[:2]:
            if isinstance(path, (str, bytes, os.PathLike)) and not _inside(path):
                raise PermissionError(f"sandbox: {event} outside the scratch directory refused: {path!r}")


sys.addaudithook(_guard)
_program = sys.argv[1]
sys.argv = [_program]
with open(_program, encoding="utf-8") as _f:
    _code = compile(_f.read(), _program, "exec")
exec(_code, {"__name__": "__main__", "__file__": _program})
'''


@dataclass(frozen=True)
class Outcome:
    """How one program ended: ``passed`` only when it exited 0 within its limits."""

    passed: bool
    status: str  # "passed", "failed", "timeout", "error" (the sandbox could not run it)
    returncode: int | None
    seconds: float
    output: str  # the tail of stdout and stderr, for reading a failure

    def to_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "status": self.status, "returncode": self.returncode,
                "seconds": round(self.seconds, 3), "output": self.output}


@functools.cache
def network_isolation() -> tuple[list[str], str]:
    """(the command prefix that takes the network away, or [], and why). Probed once per process."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return [], "no unshare binary: the network is fenced only by the audit hook"
    try:
        probe = subprocess.run([unshare, "-rn", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"unshare -rn failed ({exc}): the network is fenced only by the audit hook"
    if probe.returncode != 0:
        reason = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else f"exit {probe.returncode}"
        return [], f"unshare -rn refused ({reason}): the network is fenced only by the audit hook"
    return [unshare, "-rn"], "unshare -rn: a network namespace of its own, with only a loopback interface, down"


def _limits(timeout_s: float, memory_mb: int) -> Callable[[], None]:
    cpu_s = max(1, int(timeout_s + 0.999))

    def apply() -> None:
        # Runs in the child between fork and exec: only async-signal-safe work here.
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 1024 * 1024,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Counted per user, so this caps fork bombs but not a user's other processes (root ignores it;
        # the audit hook refuses fork and exec to every user).
        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESS_LIMIT,) * 2)

    return apply


def run_program(source: str, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB,
                python: str = sys.executable) -> Outcome:
    """Run ``source`` as a program in the sandbox; passed when it exits 0 within ``timeout_s``."""
    prefix, _ = network_isolation()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ctxpress-sandbox-") as scratch:
        root = Path(scratch)
        (root / "guard.py").write_text(_GUARD, encoding="utf-8")
        (root / "program.py").write_text(source, encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
        command = [*prefix, python, "-I", "-B", "guard.py", "program.py"]
        try:
            process = subprocess.Popen(command, cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       preexec_fn=_limits(timeout_s, memory_mb),
                                       start_new_session=True)
        except OSError as exc:
            return Outcome(False, "error", None, time.perf_counter() - started, f"could not start: {exc}")
        try:
            out, _ = process.communicate(timeout=timeout_s)
            # killed by its CPU limit (SIGXCPU, then SIGKILL at the hard limit): out of time as surely as the clock
            cpu_limit = process.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
            status = "passed" if process.returncode == 0 else "timeout" if cpu_limit else "failed"
        except subprocess.TimeoutExpired:
            _kill_group(process)
            out, _ = process.communicate()
            status = "timeout"
    text = out.decode("utf-8", errors="replace")[-OUTPUT_KEPT:]
    return Outcome(status == "passed", status, process.returncode, time.perf_counter() - started, text)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
