"""Offset commits written by a thread of their own, one at a time.

A commit (a record appended to the offsets journal under the table's lock) takes tens of
microseconds, but milliseconds when it waits for the lock or writes the table's snapshot (an
fsync), tens of them on a busy machine. Written in the consumer loop's thread, it would be
paid by every message that arrives meanwhile; :class:`OffsetWriter` writes it in a thread
while the loop goes on. The loop's :class:`~store.client.offset_keeper.OffsetKeeper` decides
what is committed and when, and how far delivery may run ahead meanwhile; this only writes.

A commit that is quick (the table's lock free, only a record to append) is written in the
loop's thread instead, when ``quick`` is given: handing it over and taking its outcome back
(two threads' wake-ups, the GIL passed back and forth around each of its system calls) cost
more than the commit itself, for a member of one queue at every pull (500 messages raw).

The thread is a plain one fed by a queue, not a ``concurrent.futures`` pool: that package
loads ``logging`` and ``traceback`` (and compiles their regular expressions), ~3 ms of the
start of every ``mqctl consume`` that writes its messages inline and needs no pool. It ends
as a pool's worker would: at close(), when its writer is collected, or at the interpreter's
exit after the commit out.
"""
from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from queue import SimpleQueue

from store.errors import StoreIOError
from store.log.offsets import QueueKey, Warn

Commit = Callable[[dict[QueueKey, int], bool], set[str]]
QuickCommit = Callable[[dict[QueueKey, int], bool], "set[str] | None"]   # None: not quick, not written


class _Out:
    """A commit handed to the writer thread (what to call), and its outcome once ``done``."""

    __slots__ = ("commit", "on_done", "offsets", "increase_only", "done", "skipped", "error")

    def __init__(self, commit: Commit, on_done: Callable[[], None], offsets: dict[QueueKey, int],
                 increase_only: bool) -> None:
        self.commit, self.on_done = commit, on_done
        self.offsets, self.increase_only = offsets, increase_only
        self.done = threading.Event()
        self.skipped: set[str] = set()
        self.error: BaseException | None = None

    def write(self) -> None:
        """(The writer thread.) Write it, keep the outcome, call ``on_done``."""
        try:
            self.skipped = self.commit(self.offsets, self.increase_only)
        except BaseException as exc:   # taken, and raised, by OffsetWriter.take()
            self.error = exc
        self.written()

    def written(self) -> None:
        self.done.set()
        try:
            self.on_done()
        except Exception:
            # (as a pool's done-callback: reported, and the thread goes on writing)
            import traceback
            traceback.print_exc()


def _write_all(jobs: SimpleQueue[_Out | None]) -> None:
    """The writer thread: each commit handed over, until None. It holds no writer and, idle,
    no commit: an abandoned writer is collected, and its thread then ended (as a pool's)."""
    while True:
        out = jobs.get()
        if out is None:
            return
        out.write()
        del out


def _end(jobs: SimpleQueue[_Out | None], thread: threading.Thread) -> None:
    """End a writer thread after the commit out: at close(), when its writer is collected
    (idle then: a commit out holds its writer), or at the interpreter's exit."""
    jobs.put(None)
    if thread is not threading.current_thread():
        thread.join()


class OffsetWriter:
    """One commit at a time in a writer thread; its outcome is taken in the loop's thread."""

    def __init__(self, commit: Commit, on_done: Callable[[], None], quick: QuickCommit | None = None) -> None:
        self._commit = commit
        self._quick = quick
        self._on_done = on_done
        self._jobs: SimpleQueue[_Out | None] = SimpleQueue()
        self._end: weakref.finalize[..., OffsetWriter] | None = None
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
        is called from there when it is written. A quick commit is written here, before
        this returns (``on_done`` called here; its outcome, a failure too, taken by :meth:`take`
        as the thread's)."""
        assert self._inflight is None, "one commit at a time"
        if self._quick is not None:
            error = None
            try:
                skipped = self._quick(offsets, increase_only)
            except Exception as exc:   # noqa: BLE001 - raised by take(), as the thread's
                skipped, error = set(), exc
            if skipped is not None:
                self._inflight = out = _Out(self._commit, self._on_done, offsets, increase_only)
                out.skipped, out.error = skipped, error
                out.written()
                return
        if self._end is None or not self._end.alive:
            # A daemon thread, so that a process never waits on an idle one; the finalizer
            # ends it after the commit out at close(), when this writer is collected, or at
            # the interpreter's exit (a thread pool's guarantee).
            thread = threading.Thread(target=_write_all, args=(self._jobs,), name="mq-offsets", daemon=True)
            thread.start()
            self._end = weakref.finalize(self, _end, self._jobs, thread)
        self._inflight = out = _Out(self._commit, self._on_done, offsets, increase_only)
        self._jobs.put(out)

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
        if self._end is not None:
            self._end()


class Refusals:
    """Commits the file system refused (a full disk, the offsets journal unwritable). The
    member goes on: its offsets stay in memory (dirty) and are committed again after
    :attr:`RETRY_S` (no lag or idle commit before: not at every turn), by the persist
    interval's look or a later lag commit; said once until one is written. Nothing is lost: a
    crash meanwhile hands the messages consumed since the last commit to the next owner again,
    as any crash does (a stopping member that cannot commit says so, as before)."""

    RETRY_S = 5.0

    def __init__(self) -> None:
        self.error: StoreIOError | None = None   # why the last commit failed; None once one is written
        self.retry_at = 0.0   # (monotonic)

    def refused(self, exc: StoreIOError, warn: Warn) -> None:
        if self.error is None:
            warn(f"could not commit offsets ({exc}); they are kept and committed again in {self.RETRY_S:g} s "
                 f"(a crash meanwhile delivers the messages since the last commit again)")
        self.error = exc
        self.retry_at = time.monotonic() + self.RETRY_S

    def waiting(self) -> bool:
        """Whether a refused commit is not to be tried again yet."""
        return self.error is not None and time.monotonic() < self.retry_at
