"""Which files some process holds a ``flock`` on, read from ``/proc/locks`` without locking.

Membership and queue locks prove a holder alive by an OS lock (``store/client/members.py``,
``store/client/qlocks.py``); their own probes take a shared lock for an instant, which can make
a concurrent acquisition fail once. A monitor that looks every second must not do even that,
so it asks the kernel's lock table instead: one read of ``/proc/locks`` per look, one
``stat`` per lock file, no descriptor on any of them.

``/proc/locks`` lines (Linux, ``fs/locks.c``)::

    1: FLOCK  ADVISORY  WRITE 4242 fe:00:5383720 0 EOF
    2: POSIX  ADVISORY  READ  99 08:01:1234 0 EOF
    3: -> FLOCK  ADVISORY  WRITE 77 fe:00:5383720 0 EOF     (a waiter, blocked)

The device is ``major:minor`` in hex, the inode in decimal; waiters (``->``) hold nothing.
Where the file cannot be read (not Linux, a restricted ``/proc``) :meth:`HeldLocks.held`
answers None and callers fall back to whether the recorded pid is alive.
"""
from __future__ import annotations

import os

PROC_LOCKS = "/proc/locks"


class HeldLocks:
    """One reading of the kernel's table of held ``flock`` locks, taken at the first question
    (a look at a store with no members and no queue locks does not read it)."""

    def __init__(self, path: str = PROC_LOCKS) -> None:
        self.path = path
        self._held: set[tuple[int, int]] | None = None   # read at the first question
        self._missing = False

    @property
    def available(self) -> bool:
        return self._table() is not None

    def _table(self) -> set[tuple[int, int]] | None:
        if self._held is None:
            try:
                with open(self.path, "rb") as f:
                    text = f.read()
            except OSError:
                self._held = set()
                self._missing = True
                return None
            self._missing = False
            self._held = _parse(text)
        return None if self._missing else self._held

    def held(self, path: str | os.PathLike[str], pid: int | None = None) -> bool | None:
        """Whether a process holds a lock on ``path`` (None: the file is gone). Without the
        kernel's table, whether ``pid`` (the holder its record names) is a running process."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError:
            return False
        table = self._table()
        if table is not None:
            return (st.st_dev, st.st_ino) in table
        return pid_alive(pid)


def _parse(text: bytes) -> set[tuple[int, int]]:
    held = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[1] != b"FLOCK":   # a waiter's line has "->" there
            continue
        dev = parts[5].split(b":")
        if len(dev) != 3:
            continue
        try:
            held.add((os.makedev(int(dev[0], 16), int(dev[1], 16)), int(dev[2])))
        except ValueError:
            continue
    return held


def pid_alive(pid: int | None) -> bool:
    """Whether ``pid`` names a process (of any user) on this machine."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
