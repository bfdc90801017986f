"""Offset commits written by a thread of their own, one at a time.

A commit (the group's offset table read, merged, written and fsynced under its lock) takes
milliseconds, tens of them on a busy machine. Written in the consumer loop's thread, it is
paid by every message that arrives meanwhile; :class:`OffsetWriter` writes it in a thread
while the loop goes on. The loop's :class:`~store.client.offset_keeper.OffsetKeeper` decides
what is committed and when, and how far delivery may run ahead meanwhile; this only writes.

Each commit gets a thread of its own, not a pool's: commits are milliseconds apart at the
least, and ``concurrent.futures`` (with the ``logging`` it imports) was a few ms of every
consumer's start-up.
"""
from __future__ import annotations

import threading
from typing import Callable

from store.log.offsets import QueueKey

Commit = Callable[[dict[QueueKey, int], bool], set[str]]


class _Written:
    """One commit's outcome, set by its thread: the skipped topics, or what it raised."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.skipped: set[str] = set()
        self.error: BaseException | None = None


class OffsetWriter:
    """One commit at a time in a writer thread; its outcome is taken in the loop's thread."""

    def __init__(self, commit: Commit, on_done: Callable[[], None]) -> None:
        self._commit = commit
        self._on_done = on_done
        self._thread: threading.Thread | None = None
        # The commit being written: its outcome (the skipped topics) and the offsets it writes.
        # While it is out, only the writer thread touches the offset store.
        self._inflight: tuple[_Written, dict[QueueKey, int]] | None = None

    @property
    def busy(self) -> bool:
        """Whether a commit is out (written, or its outcome not taken yet)."""
        return self._inflight is not None

    @property
    def written(self) -> bool:
        """Whether the commit out was written (its outcome not taken yet)."""
        return self._inflight is not None and self._inflight[0].done.is_set()

    def submit(self, offsets: dict[QueueKey, int], increase_only: bool) -> None:
        """Write ``offsets`` in the writer thread (only when not :attr:`busy`); ``on_done``
        is called from there when it is written."""
        assert self._inflight is None, "one commit at a time"
        out = _Written()

        def write() -> None:
            try:
                out.skipped = self._commit(offsets, increase_only)
            except BaseException as exc:   # raised in the loop's thread, by take()
                out.error = exc
            out.done.set()
            self._on_done()

        if self._thread is not None:
            self._thread.join()   # (the previous commit's thread, done: its outcome was taken)
        self._inflight = (out, offsets)
        self._thread = threading.Thread(target=write, name="mq-offsets")
        self._thread.start()

    def take(self, wait: bool) -> tuple[dict[QueueKey, int], set[str]] | None:
        """The commit out, once written (``wait``: waiting for it): its offsets and the
        topics it skipped (reset meanwhile); None while it is written or when none is out.
        A failed commit raises here, once."""
        if self._inflight is None:
            return None
        out, offsets = self._inflight
        if not wait and not out.done.is_set():
            return None
        out.done.wait()
        self._inflight = None
        if out.error is not None:
            raise out.error
        return offsets, out.skipped

    def offsets_out(self) -> dict[QueueKey, int]:
        """The offsets of the commit out (empty when none is)."""
        return self._inflight[1] if self._inflight is not None else {}

    def close(self) -> None:
        """End the writer thread (after the commit out, whose outcome is dropped: take it
        first)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
