"""Offset commits written by a thread of their own, one at a time.

A commit (a record appended to the offsets journal under the table's lock) takes tens of
microseconds, but milliseconds when it waits for the lock or writes the table's snapshot (an
fsync), tens of them on a busy machine. Written in the consumer loop's thread, it would be
paid by every message that arrives meanwhile; :class:`OffsetWriter` writes it in a thread
while the loop goes on. The loop's :class:`~store.client.offset_keeper.OffsetKeeper` decides
what is committed and when, and how far delivery may run ahead meanwhile; this only writes.
"""
from __future__ import annotations

import concurrent.futures as cf
from typing import Callable

from store.log.offsets import QueueKey

Commit = Callable[[dict[QueueKey, int], bool], set[str]]


class OffsetWriter:
    """One commit at a time in a writer thread; its outcome is taken in the loop's thread."""

    def __init__(self, commit: Commit, on_done: Callable[[], None]) -> None:
        self._commit = commit
        self._on_done = on_done
        self._pool: cf.ThreadPoolExecutor | None = None
        # The commit being written: its future (the skipped topics) and the offsets it writes.
        # While it is out, only the writer thread touches the offset store.
        self._inflight: tuple[cf.Future[set[str]], dict[QueueKey, int]] | None = None

    @property
    def busy(self) -> bool:
        """Whether a commit is out (written, or its outcome not taken yet)."""
        return self._inflight is not None

    @property
    def written(self) -> bool:
        """Whether the commit out was written (its outcome not taken yet)."""
        return self._inflight is not None and self._inflight[0].done()

    def submit(self, offsets: dict[QueueKey, int], increase_only: bool) -> None:
        """Write ``offsets`` in the writer thread (only when not :attr:`busy`); ``on_done``
        is called from there when it is written."""
        assert self._inflight is None, "one commit at a time"
        if self._pool is None:
            self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mq-offsets")
        fut = self._pool.submit(self._commit, offsets, increase_only)
        self._inflight = (fut, offsets)
        fut.add_done_callback(lambda _f: self._on_done())

    def take(self, wait: bool) -> tuple[dict[QueueKey, int], set[str]] | None:
        """The commit out, once written (``wait``: waiting for it): its offsets and the
        topics it skipped (reset meanwhile); None while it is written or when none is out.
        A failed commit raises here, once."""
        if self._inflight is None:
            return None
        fut, offsets = self._inflight
        if not wait and not fut.done():
            return None
        self._inflight = None
        return offsets, fut.result()

    def offsets_out(self) -> dict[QueueKey, int]:
        """The offsets of the commit out (empty when none is)."""
        return self._inflight[1] if self._inflight is not None else {}

    def close(self) -> None:
        """End the writer thread (after the commit out, whose outcome is dropped: take it
        first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
