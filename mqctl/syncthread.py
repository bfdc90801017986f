"""The thread that runs ``--flush sync`` fsyncs beside the sender (group commit).

One fsync in flight at a time, as RocketMQ's GroupCommitService: the sender hands the thread
a range to make durable and goes on writing; it asks :meth:`SyncThread.done` without waiting
and :meth:`SyncThread.wait` when it must. Two plain locks carry the hand-over (C calls, no
Python-level condition variables): every fsync is one wake-up of this thread and one of the
sender at most, and each costs the sender time (the interpreter lock changes hands). A
``ThreadPoolExecutor`` with a future per batch, and ``concurrent.futures``' import with
``logging``, cost a 100-message-batch send measurably more.
"""
from __future__ import annotations

import threading
from typing import Callable


class SyncThread:
    def __init__(self, sync: Callable[[int, int], None]) -> None:
        self._sync = sync
        self._request: tuple[int, int] | None = None
        self._error: BaseException | None = None
        self._go = threading.Lock()     # released by the sender: a request (or the stop) waits
        self._go.acquire()
        self._busy = threading.Lock()   # held while a request runs
        self._thread = threading.Thread(target=self._run, name="fsync", daemon=True)
        self._thread.start()

    def start(self, start: int, end: int) -> None:
        """Make ``[start, end)`` durable (the previous request must be done)."""
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("one fsync at a time")
        self._request, self._error = (start, end), None
        self._go.release()

    def done(self) -> bool:
        return not self._busy.locked()

    def wait(self) -> None:
        """Wait for the running request; raise what it raised."""
        with self._busy:
            pass
        err, self._error = self._error, None
        if err is not None:
            raise err

    def stop(self) -> None:
        """End the thread once its running request (if any) is done."""
        self._busy.acquire()
        self._request = None
        self._go.release()
        self._thread.join()
        self._busy.release()

    def _run(self) -> None:
        while True:
            self._go.acquire()
            request = self._request
            if request is None:
                return
            try:
                self._sync(*request)
            except BaseException as exc:   # handed to the sender, which ends the send with it
                self._error = exc
            self._busy.release()
