"""The thread that runs ``--flush sync`` fsyncs beside the sender (group commit).

One fsync in flight at a time, as RocketMQ's GroupCommitService: the sender hands the thread
a range to make durable and goes on writing; it asks :meth:`SyncThread.done` without waiting
and :meth:`SyncThread.wait` when it must. Requests and results pass through two
``queue.SimpleQueue`` (C calls, no Python-level condition variables): every fsync is one
wake-up of this thread and one of the sender at most, and each costs the sender time (the
interpreter lock changes hands). A ``ThreadPoolExecutor`` with a future per batch, and
``concurrent.futures``' import with ``logging``, cost a 100-message-batch send measurably
more. A Ctrl-C at any point of a hand-over leaves nothing waiting for ever: a request put
is answered, and :meth:`SyncThread.stop` ends the thread after every request put.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable


class SyncThread:
    def __init__(self, sync: Callable[[int, int], None]) -> None:
        self._sync = sync
        self._requests: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._running = False   # a request put whose result is not taken yet
        self._thread = threading.Thread(target=self._run, name="fsync", daemon=True)
        self._thread.start()

    def start(self, start: int, end: int) -> None:
        """Make ``[start, end)`` durable (the previous request must be waited for)."""
        if self._running:
            raise RuntimeError("one fsync at a time")
        self._requests.put((start, end))
        self._running = True

    def done(self) -> bool:
        return not self._running or not self._results.empty()

    def wait(self) -> None:
        """Wait for the running request; raise what it raised."""
        if not self._running:
            return
        err = self._results.get()
        self._running = False
        if err is not None:
            raise err

    def stop(self) -> None:
        """End the thread once every request put is done."""
        self._requests.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            err: BaseException | None = None
            try:
                self._sync(*request)
            except BaseException as exc:   # handed to the sender, which ends the send with it
                err = exc
            self._results.put(err)
