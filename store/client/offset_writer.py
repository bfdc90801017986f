"""Offset commits written by a thread of their own, one at a time.

A commit (a record appended to the offsets journal under the table's lock) takes tens of
microseconds, but milliseconds when it waits for the lock or writes the table's snapshot (an
fsync), tens of them on a busy machine. Written in the consumer loop's thread, it would be
paid by every message that arrives meanwhile; :class:`OffsetWriter` writes it in a thread
while the loop goes on. The loop's :class:`~store.client.offset_keeper.OffsetKeeper` decides
what is committed and when, and how far delivery may run ahead meanwhile; this only writes.

The thread is a plain one fed by a queue, not a ``concurrent.futures`` pool: that package
loads ``logging`` and ``traceback`` (and compiles their regular expressions), ~3 ms of the
start of every ``mqctl consume`` that writes its messages inline and needs no pool.
"""
from __future__ import annotations

import atexit
import threading
from queue import SimpleQueue
from typing import Callable

from store.log.offsets import QueueKey

Commit = Callable[[dict[QueueKey, int], bool], set[str]]


class _Out:
    """A commit handed to the writer thread, and its outcome once ``done`` is set."""

    __slots__ = ("offsets", "increase_only", "done", "skipped", "error")

    def __init__(self, offsets: dict[QueueKey, int], increase_only: bool) -> None:
        self.offsets = offsets
        self.increase_only = increase_only
        self.done = threading.Event()
        self.skipped: set[str] = set()
        self.error: BaseException | None = None


class OffsetWriter:
    """One commit at a time in a writer thread; its outcome is taken in the loop's thread."""

    def __init__(self, commit: Commit, on_done: Callable[[], None]) -> None:
        self._commit = commit
        self._on_done = on_done
        self._jobs: SimpleQueue[_Out | None] = SimpleQueue()
        self._thread: threading.Thread | None = None
        # The commit being written (its offsets, then its outcome). While it is out, only the
        # writer thread touches the offset store.
        self._inflight: _Out | None = None

    @property
    def busy(self) -> bool:
        """Whether a commit is out (written, or its outcome not taken yet)."""
        return self._inflight is not None

    @property
    def written(self) -> bool:
        """Whether the commit out was written (its outcome not taken yet)."""
        return self._inflight is not None and self._inflight.done.is_set()

    def submit(self, offsets: dict[QueueKey, int], increase_only: bool) -> None:
        """Write ``offsets`` in the writer thread (only when not :attr:`busy`); ``on_done``
        is called from there when it is written."""
        assert self._inflight is None, "one commit at a time"
        if self._thread is None:
            # A daemon thread, so that a process leaving without close() does not wait on
            # it forever; close() at the interpreter's exit still lets a commit out finish
            # (a thread pool's guarantee).
            self._thread = threading.Thread(target=self._run, name="mq-offsets", daemon=True)
            self._thread.start()
            atexit.register(self.close)
        self._inflight = out = _Out(offsets, increase_only)
        self._jobs.put(out)

    def _run(self) -> None:
        """(The writer thread.) Write each commit handed over, until close() hands None."""
        while (out := self._jobs.get()) is not None:
            try:
                out.skipped = self._commit(out.offsets, out.increase_only)
            except BaseException as exc:   # taken, and raised, by take()
                out.error = exc
            out.done.set()
            try:
                self._on_done()
            except Exception:
                # (as a pool's done-callback: reported, and the thread goes on writing)
                import traceback
                traceback.print_exc()

    def take(self, wait: bool) -> tuple[dict[QueueKey, int], set[str]] | None:
        """The commit out, once written (``wait``: waiting for it): its offsets and the
        topics it skipped (reset meanwhile); None while it is written or when none is out.
        A failed commit raises here, once."""
        out = self._inflight
        if out is None:
            return None
        if not wait and not out.done.is_set():
            return None
        out.done.wait()
        self._inflight = None
        if out.error is not None:
            error, out.error = out.error, None
            raise error
        return out.offsets, out.skipped

    def offsets_out(self) -> dict[QueueKey, int]:
        """The offsets of the commit out (empty when none is)."""
        return self._inflight.offsets if self._inflight is not None else {}

    def close(self) -> None:
        """End the writer thread (after the commit out, whose outcome is dropped: take it
        first)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            atexit.unregister(self.close)
            self._jobs.put(None)
            thread.join()
