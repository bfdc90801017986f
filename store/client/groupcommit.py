"""Group commit for a producer with ``flush="sync"``: :class:`GroupCommit` acknowledges written
batches once an fsync covers them, the fsyncs running in :class:`SyncThread` beside the writer
(what ``mqctl send --flush sync`` and ``Producer(flush="sync", group_commit=True)`` use).

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
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from store.log.messagestore import Store

MAX_WAITING = 16   # batches written but not yet covered by an fsync, at most


class SyncThread:
    """Runs ``sync(start, end)`` requests one at a time in a thread of its own."""

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


class GroupCommit:
    """Acknowledgements of batches written without ``sync``, each given once an fsync covers it.

    Call :meth:`written` right after each write (it reads the store's ``last_write``): the
    batch's ``ack`` runs later, in the writer's thread, during a later :meth:`written` or in
    :meth:`settle`. A batch written while an fsync runs waits for the next one, which covers
    every batch written meanwhile (``fdatasync`` flushes the whole file), so a slow disk costs
    one fsync per group, not per batch. At most ``max_waiting`` batches wait. A batch whose
    fsync fails is never acknowledged, nor is any batch after it; the error is raised to the
    writer."""

    def __init__(self, store: Store, max_waiting: int = MAX_WAITING) -> None:
        self._store = store
        self._max_waiting = max_waiting
        self._syncer: SyncThread | None = None           # started on the first batch
        self._flight: list[Callable[[], None]] | None = None   # its fsync running, covering these
        self._waiting: list[Callable[[], None]] = []        # written since that fsync started
        self._group: tuple[int, int] | None = None          # their log range, for the next one

    def written(self, ack: Callable[[], None]) -> None:
        """The batch just written: ``ack()`` once it is durable."""
        start, end = self._store.last_write
        self._waiting.append(ack)
        g = self._group
        self._group = (min(g[0], start), max(g[1], end)) if g else (start, end)
        syncer = self._syncer
        if self._flight is not None and syncer is not None and (syncer.done()
                                                                or len(self._waiting) >= self._max_waiting):
            self._land()
        if self._flight is None:
            self._launch()

    def settle(self) -> None:
        """Make every written batch durable and acknowledge it now (the input paused: ``tail
        -f | mqctl send --flush sync`` acknowledges each message as soon as it is on disk)."""
        if self._flight is not None:
            self._land()
        if self._waiting:
            self._launch()
            self._land()

    def close(self) -> None:
        """:meth:`settle`, then end the fsync thread (also when settling failed)."""
        try:
            self.settle()
        finally:
            if self._syncer is not None:
                self._syncer.stop()
                self._syncer = None

    def _launch(self) -> None:
        """Start the fsync of every batch written since the last one started."""
        if self._syncer is None:
            self._syncer = SyncThread(self._store.sync_log)
        assert self._group is not None   # set by the write that put an ack in _waiting
        self._syncer.start(*self._group)
        self._flight, self._waiting, self._group = self._waiting, [], None

    def _land(self) -> None:
        """Wait for the running fsync, then acknowledge the batches it covered."""
        flight, self._flight = self._flight, None
        assert flight is not None and self._syncer is not None   # callers land only a running fsync
        try:
            self._syncer.wait()
        except KeyboardInterrupt:
            self._flight = flight   # still running: close() lands it and acknowledges what it covered
            raise
        except BaseException:
            self._waiting, self._group = [], None   # nothing after a failed fsync is acknowledged
            raise
        # Every batch the fsync covered is acknowledged, also after an ack that raised (send
        # --json whose stdout failed: the others still count what was stored); then its error.
        failed: BaseException | None = None
        for ack in flight:
            try:
                ack()
            except BaseException as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
