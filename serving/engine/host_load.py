"""How much of this host's CPU other processes are using, and how many threads the engine runs with.

llama.cpp's threads meet at a barrier after every operation of every layer, so one of them waiting for a core
stalls all the others. Measured on 2 cores (``python -m benchmarks.busy_host``, docs/inference.md): beside a
process spinning at the engine's own priority (a test run started in a terminal), 2 threads generate a token in
2.9x the quiet time and 1 thread in 1.5x, while a prompt is still processed a little faster on 2 (0.56x of the
quiet speed against 0.45x); beside one at nice 10 (a build that lowers its priority) 2 threads keep their quiet
speed. So the adaptive engine processes prompts on every core and generates on a core fewer for each core's
worth of CPU that processes at its priority (or above) took over the last seconds; niced ones are not counted:
the kernel gives them the CPU only when the engine's threads leave it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
OWN_STAT = Path("/proc/self/stat")
SAMPLE_S = 0.5
# Each sample's weight in the running estimate: the last ~3 s count.
SMOOTHING = 0.3


def _host_jiffies() -> tuple[int, int] | None:
    """CPU time of the whole host so far, in clock ticks: (at nice <= 0: user + system, niced: nice)."""
    try:
        with PROC_STAT.open() as f:
            fields = f.readline().split()
        user, nice, system = int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, ValueError, IndexError):
        return None
    return user + system, nice


def _own_jiffies() -> int:
    try:
        fields = OWN_STAT.read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return 0


class HostLoad:
    """Samples, on a daemon thread, the cores' worth of CPU other processes at this process's priority (or
    above) are using. ``other_cores`` is None until two samples were taken, or where the kernel does not say."""

    def __init__(self, sample_s: float = SAMPLE_S) -> None:
        self.sample_s = sample_s
        self.other_cores: float | None = None
        self._niced = os.nice(0) > 0  # a niced engine competes with niced processes too
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HostLoad:
        if _host_jiffies() is not None:
            self._thread = threading.Thread(target=self._run, name="host-load", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def sample(self, before: tuple[int, int, int, float], after: tuple[int, int, int, float]) -> float:
        """Other processes' cores between two readings of (normal, niced, own ticks, monotonic seconds)."""
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        seconds = max(after[3] - before[3], 1e-6)
        normal, niced, own = (after[i] - before[i] for i in range(3))
        other = normal + (niced if self._niced else 0) - own
        return max(0.0, other / ticks_per_s / seconds)

    def _reading(self) -> tuple[int, int, int, float] | None:
        host = _host_jiffies()
        if host is None:
            return None
        return host[0], host[1], _own_jiffies(), time.monotonic()

    def _run(self) -> None:
        last = self._reading()
        while not self._stop.wait(self.sample_s):
            now = self._reading()
            if last is None or now is None:
                last = now
                continue
            cores = self.sample(last, now)
            last = now
            self.other_cores = cores if self.other_cores is None else (
                SMOOTHING * cores + (1 - SMOOTHING) * self.other_cores)

    def threads(self, cores: int | None = None) -> int:
        """Threads to generate on now: a core left to each core's worth of other work, at least one."""
        cores = cores or os.cpu_count() or 1
        busy = round(self.other_cores or 0.0)
        return max(1, cores - busy)
