"""CPU hogs for the benchmarks: ``yes > /dev/null`` on every core, as a busy machine.

Both sides of a comparison run beside the same hogs (they are started once, before the
interleaved repetitions, and ended by their own process ids afterwards)::

    with cpu_hogs(2):
        ...
"""
from __future__ import annotations

import atexit
import os
import subprocess
from pathlib import Path


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` shows them."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


class CpuHogs:
    """``count`` busy loops (``yes > /dev/null``; None: one per core, 0: none), from
    :meth:`start` (or entering the block) to :meth:`stop` (or leaving it; also at exit, if
    a benchmark is interrupted in between)."""

    def __init__(self, count: int | None) -> None:
        self.count = (os.cpu_count() or 1) if count is None else count
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> CpuHogs:
        self.procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for _ in range(self.count)]
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()

    def __enter__(self) -> CpuHogs:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def cpu_hogs(count: int | None) -> CpuHogs:
    """CPU hogs for a ``with`` block (see :class:`CpuHogs`)."""
    return CpuHogs(count)
