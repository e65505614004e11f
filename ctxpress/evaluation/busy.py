"""A busy host: CPU-bound processes beside the appliance while a benchmark runs (``bench --background-load N``).

On a developer's machine something else always runs. Each process spins at nice 10 by default, as a build tool
that lowers its own priority would, or at nice 0, as a test run started in a terminal does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

SPIN = "import os, sys\nos.nice(int(sys.argv[1]))\nwhile True:\n    pass\n"


class BackgroundLoad:
    def __init__(self, cores: int, nice: int = 10) -> None:
        if cores < 0 or cores > (os.cpu_count() or 1):
            raise ValueError(f"--background-load {cores}: between 0 and the {os.cpu_count()} cores of this host")
        if not 0 <= nice <= 19:
            raise ValueError(f"background load at nice {nice}: between 0 and 19")
        self.cores = cores
        self.nice = nice
        self._procs: list[subprocess.Popen[bytes]] = []
        self.cpu_s = 0.0  # CPU time the load took, read when it stops: proof that it ran

    def start(self) -> None:
        self._procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(self.nice)], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                       for _ in range(self.cores)]

    def stop(self) -> None:
        for proc in self._procs:
            try:
                with open(f"/proc/{proc.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                self.cpu_s += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        self._procs = []
