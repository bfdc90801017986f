"""The ``--threads`` slots of ``mqctl consume --exec``: handler runs at a time, first come,
first served."""
from __future__ import annotations

import collections
import threading


class FifoSlots:
    """``--threads`` slots handed out first come, first served. A plain semaphore lets a slot
    that frees go to whoever asks next (a batch submitted later, or another waiting thread),
    so a later message could start while an earlier one still waits — and a stop then hands
    back the earlier one after the later one ran. Here a batch's turn is fixed when it is
    submitted: a freed slot passes straight to the oldest waiting ticket."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiting: collections.deque[threading.Event] = collections.deque()
        self._lock = threading.Lock()

    def ticket(self) -> threading.Event:
        """A turn: already set when a slot is free and nobody waits, else set when a slot is
        handed to it (in the order tickets were taken)."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return _GRANTED
            ev = threading.Event()
            self._waiting.append(ev)
        return ev

    def release(self) -> None:
        """A slot is free: to the oldest waiting ticket, if any."""
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1

    def withdraw(self, ev: threading.Event) -> None:
        """A ticket that will not be used: out of the queue, or its slot given back."""
        with self._lock:
            if ev in self._waiting:
                self._waiting.remove(ev)
                return
        self.release()


# The ticket of a slot taken at once, shared by every FifoSlots: set once here and never
# cleared or waited on by anyone who could block, so sharing it is safe; no Event is made per
# handler start.
_GRANTED = threading.Event()
_GRANTED.set()
